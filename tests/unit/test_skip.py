"""``raise pulsecron.Skip("reason")``: the slot is recorded ``skipped`` with the reason, sync or
async, and is not retried whatever the job's retries (docs/jobs.md)."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta

import pytest

import pulsecron
from node.handlers.context import Outcome, RunContext
from node.handlers.invoke import invoke
from node.handlers.threads import HandlerThreads
from node.pipeline.outcomes import after_run
from tests.helpers.claimed import job

SLOT = datetime(2026, 1, 1, tzinfo=UTC)


def skips_sync(ctx: RunContext) -> None:
    ctx.log("looked, found nothing")
    raise pulsecron.Skip("no new rows since the last slot")


async def skips_async(ctx: RunContext) -> None:
    raise pulsecron.Skip()


@pytest.fixture
async def threads() -> AsyncIterator[HandlerThreads]:
    pool = HandlerThreads(2)
    yield pool
    pool.shutdown()


def context() -> RunContext:
    return RunContext(uuid.uuid4(), "j", "t", {}, SLOT, 1, 30.0, "n1", "z")


async def test_a_sync_handler_skips_with_its_reason(threads: HandlerThreads) -> None:
    outcome = await invoke(f"{__name__}:skips_sync", context(), 30.0, threads)
    assert (outcome.status, outcome.error) == ("skipped", "no new rows since the last slot")
    assert outcome.output is not None and "found nothing" in outcome.output


async def test_an_async_handler_skips_without_a_reason(threads: HandlerThreads) -> None:
    outcome = await invoke(f"{__name__}:skips_async", context(), 30.0, threads)
    assert (outcome.status, outcome.error) == ("skipped", "skipped by its handler")


def test_a_skipped_slot_is_not_retried() -> None:
    claimed = job(f"{__name__}:skips_sync")._replace(retries=3)
    done, skips = after_run(
        claimed, Outcome("skipped", "nothing", 0.1), SLOT + timedelta(seconds=1)
    )
    assert (done.outcome, done.next_attempt, skips) == ("skipped", 1, [])
    assert done.next_slot == SLOT + timedelta(minutes=1)
