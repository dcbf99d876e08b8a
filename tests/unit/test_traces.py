"""Traces (``node.handlers.traces``): trace ids derived from (job, slot) alike in every
process, one span per attempt with the run's attributes and outcome, spans for a lost
attempt and a fenced write in the same trace, the traceparent handed to handlers, and a
node without ``--otel`` that loads no tracing at all."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode

from cluster.jobs import handlerrefs
from node.handlers.celerytask import _send
from node.handlers.context import RunContext
from node.handlers.httpcall import run_http
from node.handlers.shell import _shell_env
from node.handlers.traces import Tracing, slot_ids, traceparent_of
from tests.helpers import REPO
from tests.helpers.claimed import job

TRACEPARENT = re.compile(r"^00-[0-9a-f]{32}-[0-9a-f]{16}-01$")
JOB_ID = uuid.UUID("6f1c1e9e-1c55-4c43-a7a7-6a0c3b4f2d11")
SLOT = datetime(2031, 3, 4, 12, 0, tzinfo=UTC)


def test_trace_ids_come_from_job_and_slot_alike_in_every_process() -> None:
    here = slot_ids(JOB_ID, SLOT)
    code = (
        "import uuid, datetime as d; from node.handlers.traces import slot_ids; "
        f"print(slot_ids(uuid.UUID('{JOB_ID}'), d.datetime(2031, 3, 4, 14, 0, "
        "tzinfo=d.timezone(d.timedelta(hours=2)))))"
    )
    for seed in ("1", "2"):
        out = subprocess.run(
            [sys.executable, "-c", code],
            cwd=REPO,
            env={"PYTHONHASHSEED": seed, "PATH": ""},
            capture_output=True,
            text=True,
            check=True,
        )
        assert out.stdout.strip() == str(here), "the same instant in another offset"
    assert slot_ids(JOB_ID, SLOT + timedelta(minutes=1))[0] != here[0]
    assert slot_ids(uuid.uuid4(), SLOT)[0] != here[0]
    assert TRACEPARENT.match(traceparent_of(*here))


@pytest.fixture
def traced(monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[Tracing, InMemorySpanExporter]]:
    # Tracing also exports to the default OTLP endpoint, where nothing listens here: its
    # flush at shutdown gives up at once instead of retrying for the default 10 s.
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_TIMEOUT", "0.2")
    tracing = Tracing("n1", "eu-1")
    exporter = InMemorySpanExporter()
    tracing._provider.add_span_processor(SimpleSpanProcessor(exporter))
    yield tracing, exporter
    tracing.shutdown()


def test_an_attempt_is_one_span_with_its_attributes_and_outcome(
    traced: tuple[Tracing, InMemorySpanExporter],
) -> None:
    tracing, exporter = traced
    run = job("shell:true")._replace(attempt=2, lease_token=7, origin="rerun")
    parent = tracing.start(run)
    trace_id, slot_span = slot_ids(run.id, run.slot)
    assert TRACEPARENT.match(parent) and parent.startswith(f"00-{trace_id:032x}-")
    assert exporter.get_finished_spans() == ()
    tracing.end(run, "failed", "boom")
    tracing.end(run, "failed", "boom")  # once only
    (span,) = exporter.get_finished_spans()
    assert span.context.trace_id == trace_id and span.parent is not None
    assert span.parent.span_id == slot_span
    assert parent == traceparent_of(trace_id, span.context.span_id)
    assert dict(span.attributes or {}) == {
        "pulse.job": "j",
        "pulse.job_id": str(run.id),
        "pulse.tenant": "t",
        "pulse.slot": run.slot.isoformat(),
        "pulse.attempt": 2,
        "pulse.origin": "rerun",
        "pulse.fencing_token": 7,
        "pulse.node": "n1",
        "pulse.zone": "eu-1",
        "pulse.status": "failed",
    }
    assert span.status.status_code is StatusCode.ERROR and span.status.description == "boom"


def test_a_lost_attempt_and_a_fenced_write_land_in_the_slots_trace(
    traced: tuple[Tracing, InMemorySpanExporter],
) -> None:
    tracing, exporter = traced
    run = job("shell:true")._replace(attempt=3)
    tracing.lost(run, 2, "n9", "owner gone")
    tracing.fenced(run)
    tracing.start(run)
    tracing.end(run, "succeeded")
    lost, fenced, ran = exporter.get_finished_spans()
    trace_id = slot_ids(run.id, run.slot)[0]
    assert {s.context.trace_id for s in (lost, fenced, ran)} == {trace_id}
    assert lost.attributes is not None and fenced.attributes is not None
    assert (lost.attributes["pulse.attempt"], lost.attributes["pulse.node"]) == (2, "n9")
    assert lost.attributes["pulse.recovered_by"] == "n1" and "pulse.zone" not in lost.attributes
    assert lost.status.status_code is StatusCode.ERROR
    assert fenced.attributes["pulse.status"] == "fenced"
    assert ran.status.status_code is StatusCode.UNSET


def test_a_shell_command_gets_traceparent_only_when_traced() -> None:
    base = {
        "job_id": JOB_ID,
        "job_name": "j",
        "tenant_id": "t",
        "payload": {},
        "scheduled_for": SLOT,
        "attempt": 1,
        "timeout_s": 5.0,
        "node_id": "n1",
        "zone": "z",
    }
    parent = traceparent_of(*slot_ids(JOB_ID, SLOT))
    assert (
        _shell_env(RunContext(**base, traceparent=parent), (), "/dev/null")["TRACEPARENT"] == parent
    )
    assert "TRACEPARENT" not in _shell_env(RunContext(**base), (), "/dev/null")


def test_a_node_without_otel_loads_no_tracing() -> None:
    """(redis-py imports OpenTelemetry's API for its own metrics; Pulse adds nothing.)"""
    code = (
        "import sys, json, node.cli, node.runtime, node.parts, pulsecron; "
        "print(json.dumps(sorted(m for m in sys.modules if m == 'node.handlers.traces' "
        "or m.startswith(('opentelemetry.sdk.trace', 'opentelemetry.exporter')))))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True
    )
    assert json.loads(out.stdout) == []


def test_otel_without_the_extra_is_one_line_exit_2(tmp_path: Path) -> None:
    """A node started with --otel where OpenTelemetry's SDK is not installed (a bare
    ``opentelemetry`` package shadows it here) refuses to start, before connecting."""
    (tmp_path / "opentelemetry").mkdir()
    (tmp_path / "opentelemetry" / "__init__.py").write_text("")
    out = subprocess.run(
        [sys.executable, "-m", "node", "node", "--otel"],
        cwd=REPO,
        env={
            **os.environ,
            "PYTHONPATH": str(tmp_path),
            "PULSE_DATABASE_URL": "postgresql://x@127.0.0.1:1/x",
        },
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 2 and out.stdout == ""
    assert out.stderr.splitlines() == [
        "pulse: refusing to start: --otel needs OpenTelemetry: pip install 'pulsecron[otel]'"
    ]


def _ctx(traceparent: str | None) -> RunContext:
    return RunContext(
        job_id=JOB_ID,
        job_name="j",
        tenant_id="t",
        payload={"a": 1},
        scheduled_for=SLOT,
        attempt=1,
        timeout_s=5.0,
        node_id="n1",
        zone="z",
        traceparent=traceparent,
    )


async def test_an_http_request_carries_the_traceparent_only_when_traced() -> None:
    seen: list[httpx.Request] = []

    def answer(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(200)

    target = handlerrefs.parse("http:POST https://hooks.example.com/run")
    assert isinstance(target, handlerrefs.HttpTarget)
    parent = traceparent_of(*slot_ids(JOB_ID, SLOT))
    async with httpx.AsyncClient(transport=httpx.MockTransport(answer)) as client:
        for given in (parent, None):
            done = await run_http(client, target, _ctx(given), 5.0)
            assert done.status == "succeeded"
    assert seen[0].headers["traceparent"] == parent
    assert "traceparent" not in seen[1].headers


def test_a_celery_task_carries_the_traceparent_only_when_traced() -> None:
    sent: list[dict[str, Any]] = []

    class App:
        def send_task(self, name: str, **options: Any) -> None:
            sent.append(options)

    target = handlerrefs.parse("celery:app.tasks.rollup")
    assert isinstance(target, handlerrefs.CeleryTarget)
    parent = traceparent_of(*slot_ids(JOB_ID, SLOT))
    _send(App(), target, _ctx(parent))
    _send(App(), target, _ctx(None))
    assert sent[0]["headers"] == {"traceparent": parent}
    assert "headers" not in sent[1]
