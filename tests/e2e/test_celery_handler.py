"""celery: handlers end to end: a real ``pulse node`` sends tasks to a real ``celery worker``
process through the local Redis (its own database number, and a queue of its own per test
so parallel runs never take each other's tasks).

A plain send succeeds once the broker accepted it, and the worker receives the payload as
keyword arguments under the task id = the slot's idempotency key; a waited task's result
is kept with the run; a waited task that raises fails the attempt, and its retry too.
"""

from __future__ import annotations

import json
import os
import secrets
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from cluster.jobs.spec import JobSpec
from cluster.settings import ClusterSettings
from tests.helpers import REPO
from tests.helpers.fleet import Fleet, triggered
from tests.helpers.waiting import until

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(120)]

BROKER = "redis://127.0.0.1:6379/14"


@pytest.fixture
def worker(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    """A Celery worker on a queue of its own; its queue and the file its tasks write."""
    queue = f"pulse-test-{secrets.token_hex(6)}"
    out = tmp_path / "celery.jsonl"
    env = {k: v for k, v in os.environ.items() if not k.startswith("PULSE_")}
    env.update(PULSE_TEST_CELERY_BROKER=BROKER, PULSE_TEST_CELERY_OUT=str(out))
    argv = [sys.executable, "-m", "celery", "-A", "tests.e2e.celery_tasks", "worker"]
    argv += ["-Q", queue, "--pool", "solo", "--without-heartbeat", "--without-gossip"]
    argv += ["--without-mingle", "--loglevel", "WARNING"]
    with (tmp_path / "worker.log").open("w") as log:
        proc = subprocess.Popen(
            argv, cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )
    try:
        yield queue, out
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(10)


def received(out: Path) -> list[dict[str, Any]]:
    if not out.exists():
        return []
    return [json.loads(line) for line in out.read_text("utf-8").splitlines() if line]


def test_celery_handlers_with_a_real_worker(
    settings: ClusterSettings,
    fleet: Fleet,
    worker: tuple[str, Path],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    queue, out = worker
    monkeypatch.setenv("TEST_CELERY_BROKER", BROKER)
    own = {"broker": "${env:TEST_CELERY_BROKER}", "queue": queue}
    jobs = [
        JobSpec.build(
            "send",
            "@daily",
            {"celery": {"task": "tests.record", **own}},
            payload={"region": "eu", "n": 3},
        ),
        JobSpec.build(  # the broker is the node's --celery-broker
            "waited",
            "@daily",
            {"celery": {"task": "tests.record", "queue": queue, "wait": True}},
            payload={"k": "v"},
            timeout="30s",
        ),
        JobSpec.build(
            "explodes",
            "@daily",
            {"celery": {"task": "tests.explode", "wait": True, **own}},
            retries=1,
            retry_backoff=0,
            timeout="30s",
        ),
    ]
    ids = triggered(settings, jobs)
    fleet.start("n1", "a", "--celery-broker", BROKER)
    runs = fleet.ended_runs(3, "explodes", 2, "every celery job to end")
    assert runs["send"]["status"] == "succeeded", runs["send"]["last_error"]
    key = f"{ids['send']}:{runs['send']['scheduled_for'].isoformat()}"
    assert runs["send"]["output"]["result"] == {"task_id": key, "sent": True}

    def recorded() -> dict[str, dict[str, Any]] | None:
        seen = {row["task_id"]: row["kwargs"] for row in received(out)}
        return seen if len(seen) == 2 else None

    seen = until(recorded, "the worker to run both record tasks", 30)
    assert seen[key] == {"region": "eu", "n": 3}

    assert runs["waited"]["status"] == "succeeded", runs["waited"]["last_error"]
    waited_key = f"{ids['waited']}:{runs['waited']['scheduled_for'].isoformat()}"
    assert seen[waited_key] == {"k": "v"}
    assert runs["waited"]["output"]["result"] == {"task_id": waited_key, "result": {"keys": ["k"]}}

    assert (runs["explodes"]["status"], runs["explodes"]["attempt"]) == ("failed", 2)
    error = runs["explodes"]["last_error"]
    assert error.startswith("celery task tests.explode ended FAILURE"), error
    assert "exploded on purpose" in error
