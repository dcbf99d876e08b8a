"""``ctx.transaction()`` against a real Postgres: a handler's rows commit together with its
run's fenced completion, roll back when the completion is fenced (the lease was taken
over) or the run did not succeed, and a block that raises writes nothing. Async and sync
handlers, through the real completer."""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import AsyncIterator, Callable
from datetime import timedelta
from typing import Any

import psycopg
import pytest

from cluster.settings import ClusterSettings
from cluster.store.jobstore.store import JobStore
from cluster.store.lock.effects import EffectsStore
from cluster.store.lock.records import ClaimedJob
from cluster.store.lock.session import LockSession
from node.handlers.context import Outcome, RunContext
from node.handlers.effects import Effects
from node.pipeline.clock import DbClock
from node.pipeline.completer import Completer
from node.pipeline.pacing import Pacing
from node.stats import Stats
from tests.helpers.sessions import ALL, Opener, add_jobs, at

OK = Outcome("succeeded", None, 0.01)


@pytest.fixture
async def table(settings: ClusterSettings) -> AsyncIterator[str]:
    name = f"effects_{secrets.token_hex(4)}"
    async with await psycopg.AsyncConnection.connect(settings.database_url, autocommit=True) as c:
        await c.execute(f"CREATE TABLE public.{name} (slot timestamptz, token bigint)")
        yield name
        await c.execute(f"DROP TABLE public.{name}")


async def rows(settings: ClusterSettings, table: str) -> list[tuple[Any, ...]]:
    async with await psycopg.AsyncConnection.connect(settings.database_url) as c:
        cur = await c.execute(f"SELECT slot, token FROM public.{table} ORDER BY slot")
        return await cur.fetchall()


def context(job: ClaimedJob, effects: Effects) -> RunContext:
    return RunContext(
        job_id=job.id,
        job_name=job.name,
        tenant_id=job.tenant,
        payload={},
        scheduled_for=job.slot,
        attempt=job.attempt,
        timeout_s=30.0,
        node_id="node-a",
        zone="z",
        fencing_token=job.lease_token,
        effects=effects,
    )


class Node:
    """The parts of a node that ``ctx.transaction()`` goes through, on a real writer."""

    def __init__(self, settings: ClusterSettings, writer: Any) -> None:
        self.effects = Effects(EffectsStore(settings, "node-a", "z"))
        self.stats = Stats()
        clock = DbClock()
        self.completer = Completer(
            writer.completions, clock, self.stats, asyncio.Event(), Pacing(clock), self.effects
        )

    async def finish(self, job: ClaimedJob, outcome: Outcome) -> None:
        self.completer.run_done(job, outcome)
        stop = asyncio.Event()
        stop.set()
        await asyncio.wait_for(self.completer.run(stop), 10)


async def first_run(
    store: JobStore, open_session: Opener, settings: ClusterSettings
) -> tuple[LockSession, Node, ClaimedJob]:
    """One job (one retry), and node-a's session, node parts and claim of its first slot
    (due at 10)."""
    await add_jobs(store, 1, retries=1)
    a = await open_session("node-a")
    (first,) = (await a.claim(ALL, 10, 30.0, now=at(10))).jobs
    return a, Node(settings, a), first


async def async_handler(ctx: RunContext, table: str) -> None:
    async with ctx.transaction() as conn:
        insert = f"INSERT INTO {table} (slot, token) VALUES (%s, %s)"
        await conn.execute(insert, (ctx.scheduled_for, ctx.fencing_token))  # type: ignore[arg-type]


def sync_handler(ctx: RunContext, table: str) -> None:
    with ctx.transaction() as conn:
        insert = f"INSERT INTO {table} (slot, token) VALUES (%s, %s)"
        conn.execute(insert, (ctx.scheduled_for, ctx.fencing_token))  # type: ignore[arg-type]


async def call(handler: Callable[[RunContext, str], Any], ctx: RunContext, table: str) -> None:
    if asyncio.iscoroutinefunction(handler):
        await handler(ctx, table)
    else:
        await asyncio.to_thread(handler, ctx, table)


@pytest.mark.parametrize("handler", [async_handler, sync_handler])
async def test_effects_commit_with_the_completion_exactly_once(
    store: JobStore,
    open_session: Opener,
    settings: ClusterSettings,
    table: str,
    handler: Callable[[RunContext, str], Any],
) -> None:
    a, node, first = await first_run(store, open_session, settings)
    await call(handler, context(first, node.effects), table)
    assert await rows(settings, table) == []  # not before the run's completion
    await node.finish(first, OK)
    assert await rows(settings, table) == [(first.slot, first.lease_token)]
    job = await store.get("job-0000")
    assert job.status == "idle" and job.slot_at > first.slot and job.next_run_at

    # A zombie: its lease expired and another node took the slot over. Its effects and
    # its completion are both refused.
    due = job.next_run_at
    (second,) = (await a.claim(ALL, 10, 30.0, now=due)).jobs
    await call(handler, context(second, node.effects), table)
    b = await open_session("node-b")
    assert await b.recover(ALL, ["node-b"], now=due + timedelta(seconds=60))
    await node.finish(second, OK)
    assert await rows(settings, table) == [(first.slot, first.lease_token)]
    assert node.stats.fenced_writes == 1


@pytest.mark.parametrize("handler", [async_handler, sync_handler])
async def test_a_run_in_a_transaction_is_recorded_finished_when_it_completes(
    store: JobStore,
    open_session: Opener,
    settings: ClusterSettings,
    table: str,
    handler: Callable[[RunContext, str], Any],
) -> None:
    """The completion runs in the handler's transaction, whose ``now()`` is when the block
    began: the run, and the skips its completion writes, were recorded finished then."""
    _, node, first = await first_run(store, open_session, settings)
    await call(handler, context(first, node.effects), table)
    async with await psycopg.AsyncConnection.connect(settings.database_url) as c:
        cur = await c.execute("SELECT clock_timestamp()")
        (between,) = await cur.fetchone() or (None,)
    await node.finish(first, OK)
    run = await store.run("job-0000", slot=first.slot)
    assert run.status == "succeeded" and run.finished_at is not None
    assert run.finished_at > between
    skipped = await store.runs("job-0000", status="skipped", limit=10)  # on its way on
    assert skipped and all(r.finished_at is not None and r.finished_at > between for r in skipped)


async def test_a_run_that_fails_rolls_its_effects_back_and_is_retried(
    store: JobStore, open_session: Opener, settings: ClusterSettings, table: str
) -> None:
    _, node, first = await first_run(store, open_session, settings)
    await async_handler(context(first, node.effects), table)
    await node.finish(first, Outcome("failed", "boom after the block", 0.1))
    assert await rows(settings, table) == []
    job = await store.get("job-0000")
    assert (job.status, job.slot_at, job.attempt) == ("idle", at(10), 2)


async def test_a_block_that_raises_writes_nothing_and_one_transaction_per_run(
    store: JobStore, open_session: Opener, settings: ClusterSettings, table: str
) -> None:
    _, node, first = await first_run(store, open_session, settings)
    ctx = context(first, node.effects)
    with pytest.raises(ZeroDivisionError):
        async with ctx.transaction() as conn:
            await conn.execute(f"INSERT INTO {table} (slot, token) VALUES (now(), 1)")  # type: ignore[arg-type]
            1 / 0  # noqa: B018
    with pytest.raises(RuntimeError, match="once per run"):
        async with ctx.transaction():
            pass
    await node.finish(first, OK)
    assert await rows(settings, table) == []
    assert (await store.get("job-0000")).slot_at > first.slot


async def test_a_block_that_ends_after_its_run_was_reported_is_rolled_back(
    store: JobStore, open_session: Opener, settings: ClusterSettings, table: str
) -> None:
    _, node, first = await first_run(store, open_session, settings)
    ctx = context(first, node.effects)
    async with ctx.transaction() as conn:
        await conn.execute(f"INSERT INTO {table} (slot, token) VALUES (now(), 1)")  # type: ignore[arg-type]
        # The run timed out meanwhile: reported before its block ended (the executor marks
        # the context so when it reports the run).
        object.__setattr__(ctx, "_reported", True)
        await node.finish(first, Outcome("timed_out", "timed out after 30s", 30.0))
        assert not node.effects._pending
    assert await rows(settings, table) == []
    assert not node.effects._pending  # rolled back at the block's end, not parked


def test_a_context_without_a_node_has_no_transaction() -> None:
    from datetime import UTC, datetime
    from uuid import uuid4

    ctx = RunContext(uuid4(), "j", "t", {}, datetime.now(UTC), 1, 1.0, "n", "z")
    with pytest.raises(RuntimeError, match="needs a run started by a Pulse node"):
        ctx.transaction()
