"""Metrics a run reports: ``ctx.metric`` in Python, ``name=value`` lines in
``$PULSE_METRICS_FILE`` from a shell command; kept in the run's output object, bounded in
number and size, and what they are checked with."""

from __future__ import annotations

import json
import math
import uuid
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

from cluster.jobs.assertions import MAX_METRICS
from node.handlers import metricsfile
from node.handlers.context import Outcome, RunContext
from node.handlers.invoke import invoke
from node.handlers.threads import HandlerThreads


def context(limit: int = 16384) -> RunContext:
    return RunContext(
        job_id=uuid.uuid4(),
        job_name="m",
        tenant_id="t",
        payload={},
        scheduled_for=datetime(2026, 1, 1, tzinfo=UTC),
        attempt=1,
        timeout_s=30.0,
        node_id="n1",
        zone="z",
        output_limit=limit,
    )


def reports(ctx: RunContext) -> str:
    ctx.metric("rows", 142)
    ctx.metric("ratio", 0.5)
    ctx.metric("rows", 143)  # the last value counts
    return "done"


def reports_then_fails(ctx: RunContext) -> None:
    ctx.metric("rows", 7)
    raise RuntimeError("boom")


@pytest.fixture
async def threads() -> AsyncIterator[HandlerThreads]:
    pool = HandlerThreads(2)
    yield pool
    pool.shutdown()


async def test_python_metrics_are_kept_with_the_run(threads: HandlerThreads) -> None:
    outcome = await invoke("tests.unit.test_metrics:reports", context(), 30.0, threads)
    assert outcome.status == "succeeded"
    assert outcome.metrics == {"rows": 143.0, "ratio": 0.5}
    assert outcome.output is not None
    assert json.loads(outcome.output)["metrics"] == {"rows": 143.0, "ratio": 0.5}
    failed = await invoke("tests.unit.test_metrics:reports_then_fails", context(), 30.0, threads)
    assert failed.status == "failed"
    assert failed.output is not None and json.loads(failed.output)["metrics"] == {"rows": 7.0}


async def test_metrics_are_kept_when_the_job_keeps_no_output(threads: HandlerThreads) -> None:
    outcome = await invoke("tests.unit.test_metrics:reports", context(limit=0), 30.0, threads)
    assert outcome.output is not None
    assert json.loads(outcome.output) == {"metrics": {"rows": 143.0, "ratio": 0.5}}


def test_bad_metrics_are_refused() -> None:
    ctx = context()
    for name, value in (("Rows", 1), ("rows", math.nan), ("rows", "1"), ("rows", True)):
        with pytest.raises(ValueError, match="metric"):
            ctx.metric(name, value)  # type: ignore[arg-type]
    for i in range(MAX_METRICS):
        ctx.metric(f"m{i}", i)
    ctx.metric("m0", 5)  # an existing name may change
    with pytest.raises(ValueError, match=f"at most {MAX_METRICS}"):
        ctx.metric("one_more", 1)


def where(file: str) -> tuple[bool, int]:
    path = Path(file)
    return path.exists(), path.parent.stat().st_mode & 0o777


async def test_shell_metrics_file(threads: HandlerThreads) -> None:
    script = (
        'echo "rows=142" >> "$PULSE_METRICS_FILE"; '
        'printf "bad line\\nRows=1\\nerrors = 0\\nlag=1e400\\n" >> "$PULSE_METRICS_FILE"; '
        'echo "$PULSE_METRICS_FILE"'
    )
    outcome: Outcome = await invoke(f"shell:{script}", context(), 30.0, threads)
    assert outcome.status == "succeeded", outcome.error
    assert outcome.metrics == {"rows": 142.0, "errors": 0.0}
    assert outcome.output is not None
    kept = json.loads(outcome.output)
    assert kept["metrics"] == {"rows": 142.0, "errors": 0.0}
    # Removed once read, from a folder only the node's user can enter.
    assert where(kept["stdout"].strip()) == (False, 0o700)
    silent = await invoke("shell:true", context(), 30.0, threads)
    assert (silent.metrics, silent.output) == (None, None)


def test_the_metrics_file_is_bounded() -> None:
    lines = "\n".join(f"m{i}={i}" for i in range(MAX_METRICS + 10))
    assert len(metricsfile.parse(lines)) == MAX_METRICS
    path = metricsfile.new_path()
    with open(path, "w") as file:
        file.write("rows=1\n" + "x" * (metricsfile.MAX_FILE_BYTES + 10) + "\nlate=2\n")
    assert metricsfile.take(path) == {"rows": 1.0}
    assert metricsfile.take(path) is None
