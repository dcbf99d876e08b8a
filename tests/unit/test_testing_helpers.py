"""``pulsecron.testing``: a handler's unit test needs no database."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime

import pytest

from pulsecron import RunContext, testing

SLOT = datetime(2026, 1, 1, 12, tzinfo=UTC)


def sync_handler(ctx: RunContext) -> dict[str, object]:
    ctx.log("sync")
    return {"plan": ctx.payload["plan"], "attempt": ctx.attempt, "slot": ctx.scheduled_for}


async def async_handler(ctx: RunContext) -> str:
    await asyncio.sleep(0)
    return ctx.idempotency_key


def test_context_is_what_a_node_passes() -> None:
    ctx = testing.context(payload={"plan": "pro"}, scheduled_for=SLOT, attempt=2)
    assert isinstance(ctx, RunContext)
    assert (ctx.payload, ctx.scheduled_for, ctx.attempt) == ({"plan": "pro"}, SLOT, 2)
    assert ctx.idempotency_key == f"{ctx.job_id}:{SLOT.isoformat()}"
    assert ctx.deadline > SLOT
    assert testing.context(job_name="a").job_id == testing.context(job_name="a").job_id
    assert testing.context().scheduled_for.tzinfo is not None


def test_context_refuses_a_naive_slot_and_attempt_zero() -> None:
    with pytest.raises(ValueError, match="timezone-aware"):
        testing.context(scheduled_for=datetime(2026, 1, 1))
    with pytest.raises(ValueError, match="1-based"):
        testing.context(attempt=0)


def test_run_calls_sync_and_async_handlers() -> None:
    result = testing.run(sync_handler, payload={"plan": "pro"}, scheduled_for=SLOT, attempt=3)
    assert result == {"plan": "pro", "attempt": 3, "slot": SLOT}
    ctx = testing.context(scheduled_for=SLOT)
    assert testing.run(async_handler, ctx) == ctx.idempotency_key
    with pytest.raises(TypeError):
        testing.run(sync_handler, ctx, attempt=2)


def test_run_propagates_the_handlers_error() -> None:
    def failing(ctx: RunContext) -> None:
        raise RuntimeError("upstream down")

    with pytest.raises(RuntimeError, match="upstream down"):
        testing.run(failing)


async def test_arun_awaits_on_the_running_loop() -> None:
    with pytest.raises(RuntimeError, match="arun"):
        testing.run(async_handler)
    ctx = testing.context(scheduled_for=SLOT)
    assert await testing.arun(async_handler, ctx) == ctx.idempotency_key
    assert (await testing.arun(sync_handler, payload={"plan": "x"}))["plan"] == "x"
