"""``pulse up`` starts ``pulse web`` beside its nodes and prints its URL and a fresh admin
token, which works at once; ``--web`` on a taken address fails in one line."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import socket
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from cluster.local.processes import Command, free_port, pulse_env
from cluster.settings import ClusterSettings
from tests.helpers import REPO
from tests.helpers.waiting import until

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(120)]

TOKEN = re.compile(r"admin token, shown once: (pulse_\S+)")


def test_up_runs_pulse_web_with_a_first_admin_token(
    settings: ClusterSettings, tmp_path: Path
) -> None:
    port = free_port()
    log = tmp_path / "up.log"
    argv = [sys.executable, "-m", "node", "up", "--nodes", "1", "--zones", "a",
            "--web-bind", f"127.0.0.1:{port}"]  # fmt: skip
    proc = Command(argv, pulse_env(settings), REPO).start("pulse up", log).proc
    try:

        def output() -> str:
            if proc.poll() is not None:
                raise AssertionError(f"pulse up exited:\n{log.read_text()}")
            return log.read_text()

        token = until(lambda: TOKEN.search(output()), "the admin token", 60)[1]
        assert f"console and API: http://127.0.0.1:{port}/" in output()

        def status() -> dict[str, object] | None:
            with contextlib.suppress(httpx.HTTPError):
                answer = httpx.get(
                    f"http://127.0.0.1:{port}/api/status",
                    headers={"Authorization": f"Bearer {token}"},
                    timeout=5,
                )
                if answer.status_code == 200 and answer.json()["alive"] == 1:
                    return dict(answer.json())
            return None

        until(status, "pulse web to report the node", 60)
        assert re.search(r"^web +\| .*pulse web on http", output(), flags=re.MULTILINE)
        assert output().count(token) == 1, "the token is printed once, never logged"
        os.killpg(proc.pid, signal.SIGINT)
        assert proc.wait(60) == 0, log.read_text()
        text = log.read_text()
        assert "stopping 1 node and pulse web" in text and "web stopped" in text
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(10)


def test_up_with_web_on_a_taken_address_fails_in_one_line(settings: ClusterSettings) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = subprocess.run(
            [sys.executable, "-m", "node", "up", "--web", "--web-bind", f"127.0.0.1:{port}"],
            env=pulse_env(settings),
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
    assert done.returncode == 2
    assert len(done.stderr.strip().splitlines()) == 1 and "--web" in done.stderr
