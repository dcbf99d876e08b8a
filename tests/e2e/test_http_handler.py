"""http: handlers end to end: a real ``pulse node`` process calls a real local HTTP server.

One node runs five jobs at once: a success that carries the run's context, a secret header
and the Idempotency-Key; a 500 retried twice (three attempts, one key); a server slower
than the job's timeout; a status accepted through ``ok_status``; and a header naming a
variable the node does not have. The secret reaches the server and nothing else: not the
jobs row, not the runs rows, not the node's log.
"""

from __future__ import annotations

import json
import secrets
from typing import Any

import pytest

from cluster.jobs.spec import JobSpec
from cluster.settings import ClusterSettings
from tests.helpers.cli import spawn
from tests.helpers.fleet import Fleet, triggered
from tests.helpers.receiver import Receiver, Route, allow_local, receiver

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(120)]


def specs(url: str) -> list[JobSpec]:
    auth = {"Authorization": "Bearer ${env:HOOK_TOKEN}"}
    return [
        JobSpec.build(
            "ok",
            "@daily",
            {"http": {"method": "POST", "url": f"{url}/ok", "headers": auth}},
            payload={"region": "eu", "n": 1},
        ),
        JobSpec.build(
            "flaky", "@daily", f"http:PUT {url}/fail", retries=2, retry_backoff=0, timeout="10s"
        ),
        JobSpec.build("slow", "@daily", f"http:POST {url}/slow", timeout="1s"),
        JobSpec.build(
            "gone", "@daily", {"http": {"method": "GET", "url": f"{url}/gone", "ok_status": 404}}
        ),
        JobSpec.build(
            "unset",
            "@daily",
            {"http": {"url": f"{url}/unset", "headers": {"X-Key": "${env:PULSE_NOT_SET_X}"}}},
        ),
    ]


def paths(target: Receiver, path: str) -> list[Any]:
    return [r for r in target.received() if r.path == path]


def test_http_handlers_against_a_real_server(
    settings: ClusterSettings, fleet: Fleet, monkeypatch: pytest.MonkeyPatch
) -> None:
    secret = f"tok-{secrets.token_hex(8)}"
    monkeypatch.setenv("HOOK_TOKEN", secret)
    routes = {
        "/ok": Route(200, body=b'{"accepted": true}'),
        "/fail": Route(500, body=b"boom"),
        "/slow": Route(200, delay_s=20.0),
        "/gone": Route(404, body=b"x" * 5000),
    }
    with receiver(routes=routes) as target:
        url = f"http://127.0.0.1:{target.port}"
        ids = triggered(settings, specs(url))
        allow_local(settings)
        fleet.start("n1")
        runs = fleet.ended_runs(5, "flaky", 3, "every job to end (flaky after 3 attempts)")

        # success: the context as JSON, the secret header, the idempotency key
        (ok,) = paths(target, "/ok")
        slot = runs["ok"]["scheduled_for"].isoformat()
        assert ok.method == "POST"
        assert ok.headers["Authorization"] == f"Bearer {secret}"
        assert ok.headers["Idempotency-Key"] == f"{ids['ok']}:{slot}"
        body = ok.json()
        assert body["payload"] == {"region": "eu", "n": 1}
        assert (body["job"], body["tenant"], body["attempt"]) == ("ok", "default", 1)
        assert body["slot"] == slot
        assert runs["ok"]["status"] == "succeeded"
        result = runs["ok"]["output"]["result"]
        assert result == {"status": 200, "body": '{"accepted": true}', "body_truncated": False}

        # 500: retried, three attempts with one key, the last status and body kept
        fails = paths(target, "/fail")
        assert [r.method for r in fails] == ["PUT"] * 3
        assert len({r.headers["Idempotency-Key"] for r in fails}) == 1
        assert [r.json()["attempt"] for r in fails] == [1, 2, 3]
        assert (runs["flaky"]["status"], runs["flaky"]["attempt"]) == ("failed", 3)
        assert runs["flaky"]["last_error"].startswith(f"HTTP 500 from PUT {url}/fail")
        assert runs["flaky"]["output"]["result"]["body"] == "boom"

        # slower than the job's timeout
        assert runs["slow"]["status"] == "timed_out"
        assert runs["slow"]["last_error"] == "timed out after 1s"

        # ok_status 404; GET sends no body; the first 4 KiB of the response are kept
        (gone,) = paths(target, "/gone")
        assert gone.method == "GET" and gone.body == b""
        assert runs["gone"]["status"] == "succeeded"
        kept = runs["gone"]["output"]["result"]
        assert kept == {"status": 404, "body": "x" * 4096, "body_truncated": True}

        # a variable the node does not have: the attempt fails naming it, nothing is sent
        assert paths(target, "/unset") == []
        assert runs["unset"]["status"] == "failed"
        assert runs["unset"]["last_error"] == (
            "header X-Key: environment variable PULSE_NOT_SET_X is not set on this node"
        )

    # the secret is nowhere but at the server
    stored = fleet.sql("SELECT j::text AS t FROM jobs j UNION ALL SELECT r::text FROM runs r")
    assert stored and all(secret not in row["t"] for row in stored)
    assert "${env:HOOK_TOKEN}" in json.dumps([row["t"] for row in stored])
    fleet.stop("n1")
    log = (fleet.workdir / "n1.log").read_text("utf-8")
    assert secret not in log and "n1" in log

    # pulse jobs show prints the handler readably, with the reference, not the value;
    # pulse runs show prints the status and body kept
    started = [spawn(settings, "jobs", "show", "ok"), spawn(settings, "runs", "show", "flaky")]
    shown, run = (p.result() for p in started)
    assert shown.returncode == 0 and run.returncode == 0, (shown.stderr, run.stderr)
    assert f"handler:          http:POST {url}/ok" in shown.stdout
    assert "header Authorization: Bearer ${env:HOOK_TOKEN}" in shown.stdout
    assert secret not in shown.stdout
    assert "failed (attempt 3)" in run.stdout and '"status": 500' in run.stdout
