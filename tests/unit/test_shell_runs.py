"""How a node runs ``shell:`` handlers: the argv form with exec and no shell, and every form
with a minimal environment that never holds the node's own settings."""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator
from datetime import UTC, datetime

import pytest

from node.handlers.context import Outcome, RunContext
from node.handlers.invoke import invoke
from node.handlers.threads import HandlerThreads


@pytest.fixture
async def threads() -> AsyncIterator[HandlerThreads]:
    pool = HandlerThreads(2)
    yield pool
    pool.shutdown()


async def run(threads: HandlerThreads, ref: str) -> tuple[Outcome, str]:
    ctx = RunContext(
        job_id=uuid.uuid4(),
        job_name="envs",
        tenant_id="t",
        payload={},
        scheduled_for=datetime(2026, 1, 1, tzinfo=UTC),
        attempt=1,
        timeout_s=30.0,
        node_id="n1",
        zone="z",
        output_limit=16384,
    )
    outcome = await invoke(ref, ctx, 30.0, threads)
    stdout = json.loads(outcome.output)["stdout"] if outcome.output else ""
    return outcome, stdout or ""


@pytest.fixture(autouse=True)
def node_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PULSE_DATABASE_URL", "postgresql://u:secret-pw@db/pulse")
    monkeypatch.setenv("PULSE_REDIS_URL", "redis://:secret-pw@redis/0")
    monkeypatch.setenv("NAMED_ONE", "named")
    monkeypatch.setenv("UNNAMED_ONE", "unnamed")


@pytest.mark.parametrize(
    "ref",
    [
        "shell:env",
        'shell:{"command":"env","env":["NAMED_ONE"]}',
        'shell:{"argv":["env"],"env":["NAMED_ONE"]}',
    ],
)
async def test_every_form_runs_with_a_minimal_environment(
    threads: HandlerThreads, ref: str
) -> None:
    outcome, stdout = await run(threads, ref)
    assert outcome.status == "succeeded", outcome
    names = {line.partition("=")[0] for line in stdout.splitlines()}
    assert "PATH" in names and "PULSE_JOB_NAME" in names
    assert "secret-pw" not in stdout and "UNNAMED_ONE" not in names
    assert ("NAMED_ONE" in names) == ("NAMED_ONE" in ref)


async def test_the_argv_form_runs_without_a_shell(threads: HandlerThreads) -> None:
    outcome, stdout = await run(threads, 'shell:{"argv":["echo","$PULSE_JOB_NAME;","`id`"]}')
    assert outcome.status == "succeeded", outcome
    assert stdout == "$PULSE_JOB_NAME; `id`\n", "no expansion, no second command"
    missing, _ = await run(threads, 'shell:{"argv":["/no/such/program"]}')
    assert missing.status == "failed" and "/no/such/program" in (missing.error or "")
