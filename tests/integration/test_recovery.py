"""Recovery paths of issue 4, driven deterministically with explicit database time.

Each test plays the node's own components (lock session, outcomes, completer, shard
keeper, claimer) against real Postgres and Redis, with ``now=`` instead of sleeps.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta

import psycopg
import pytest

from cluster.errors import MembershipError
from cluster.jobs.spec import JobSpec
from cluster.members import MemberInfo, MemberRegistry
from cluster.settings import ClusterSettings
from cluster.store.jobstore.store import JobStore
from cluster.store.lock.session import LockSession, SessionLost
from node.handlers.context import Outcome
from node.membership.heartbeat import Heartbeat
from node.membership.shards import ShardKeeper
from node.pipeline.claimer import Claimer
from node.pipeline.clock import DbClock
from node.pipeline.completer import Completer
from node.pipeline.executor import Executor
from node.pipeline.outcomes import after_run, plan_at_claim
from node.pipeline.pacing import Pacing
from node.state import NodeState
from node.stats import Stats
from tests.helpers.waiting import until

T0 = datetime(2026, 1, 1, tzinfo=UTC)
ALL = list(range(16))
OK = Outcome("succeeded", None, 0.01)


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


async def open_session(settings: ClusterSettings, node_id: str, **kw: object) -> LockSession:
    session = LockSession(
        settings,
        node_id,
        "z",
        session_timeout_s=10,
        statement_timeout_s=5,
        **kw,  # type: ignore[arg-type]
    )
    await session.open()
    return session


@pytest.fixture
async def n1(store: JobStore, settings: ClusterSettings) -> AsyncIterator[LockSession]:
    session = await open_session(settings, "n1")
    assert await session.try_lock(ALL) == set(ALL)
    yield session
    await session.close()


async def drive(session: LockSession, now: datetime) -> None:
    """Claim and complete (as succeeded) until nothing is due at ``now``."""
    for _ in range(100):
        result = await session.claim(ALL, 50, 30.0, now=now)
        if not result.jobs:
            return
        for job in result.jobs:
            planned = plan_at_claim(job, now) or after_run(job, OK, now)
            assert await session.completions.complete([planned[0]], planned[1], now=now) == {job.id}
    raise AssertionError("still claiming after 100 rounds")


async def statuses(store: JobStore, name: str) -> list[tuple[int, str]]:
    runs = await store.runs(job=name, limit=1000)
    return sorted((int((r.scheduled_for - T0).total_seconds()), r.status) for r in runs)


async def test_catch_up_after_downtime_follows_each_policy(
    store: JobStore, n1: LockSession
) -> None:
    common = {"handler": "cluster.chaos.witness:record"}
    await store.definitions.add(
        JobSpec.build("s", "@every 10s", catch_up="skip", grace="15s", **common), now=T0
    )
    await store.definitions.add(JobSpec.build("o", "@every 10s", catch_up="once", **common), now=T0)
    await store.definitions.add(
        JobSpec.build("b", "@every 10s", catch_up="backfill", max_backfill=3, **common), now=T0
    )
    # The whole cluster was down from T0: slots 10..100 s came due unseen.
    await drive(n1, at(100))

    skip = await statuses(store, "s")
    assert skip == [(s, "skipped") for s in range(10, 90, 10)] + [
        (90, "succeeded"),
        (100, "succeeded"),
    ]
    once = await statuses(store, "o")
    assert once == [(s, "skipped") for s in range(10, 100, 10)] + [(100, "succeeded")]
    backfill = await statuses(store, "b")
    assert backfill == [(s, "skipped") for s in range(10, 80, 10)] + [
        (80, "succeeded"),
        (90, "succeeded"),
        (100, "succeeded"),
    ]
    for name in ("s", "o", "b"):
        job = await store.get(name)
        assert job.status == "idle" and job.next_run_at == at(110)


async def test_late_completion_after_recovery_is_fenced_and_counted(
    store: JobStore, settings: ClusterSettings, n1: LockSession
) -> None:
    # A retry left, so the lost attempt is due again (a last one lost: test_poison.py).
    spec = JobSpec.build("j", "@every 10s", "cluster.chaos.witness:record", retries=1)
    await store.definitions.add(spec, now=T0)
    (job,) = (await n1.claim(ALL, 10, 30.0, now=at(10))).jobs
    n2 = await open_session(settings, "n2")
    try:
        # n1 is alive but its lease ran out: n2 takes the slot back at t = 10 + 31 s.
        recovered = await n2.recover(ALL, ["n1", "n2"], now=at(41))
        assert [r["name"] for r in recovered] == ["j"]
        assert recovered[0]["reason"] == "lease expired"
    finally:
        await n2.close()
    stats = Stats()
    clock = DbClock()
    completer = Completer(n1.completions, clock, stats, asyncio.Event(), Pacing(clock))
    completer.run_done(job, OK)
    assert await completer.flush_once()
    assert stats.fenced_writes == 1
    row = await store.get("j")
    assert (row.status, row.slot_at, row.attempt) == ("idle", at(10), 2)
    assert await statuses(store, "j") == [(10, "lost")]


async def test_recovery_never_overwrites_a_run_that_just_finished(
    store: JobStore, settings: ClusterSettings, n1: LockSession
) -> None:
    await store.definitions.add(
        JobSpec.build("j", "@every 10s", "cluster.chaos.witness:record"), now=T0
    )
    (job,) = (await n1.claim(ALL, 10, 30.0, now=at(10))).jobs
    done, skips = after_run(job, OK, at(12))
    assert await n1.completions.complete([done], skips, now=at(12)) == {job.id}
    # Even with n1 declared dead and the lease long gone, a finished run stays finished.
    assert await n1.recover(ALL, [], now=at(500)) == []
    assert await statuses(store, "j") == [(10, "succeeded")]


async def test_dead_owner_is_recovered_without_waiting_for_its_lease(
    store: JobStore, settings: ClusterSettings
) -> None:
    spec = JobSpec.build("j", "@every 10s", "cluster.chaos.witness:record", retries=1)
    await store.definitions.add(spec, now=T0)
    doomed = await open_session(settings, "doomed")
    await doomed.try_lock(ALL)
    await doomed.claim(ALL, 10, 300.0, now=at(10))
    await doomed.close()  # the process died: its session and locks are gone
    await until(lambda: not _backends(settings, "doomed"), "the doomed backends to end")
    heir = await open_session(settings, "heir")
    try:
        assert await heir.try_lock(ALL) == set(ALL)
        # Lease still valid (300 s) but the owner has no heartbeat and no session.
        recovered = await heir.recover(ALL, ["heir"], now=at(11))
        assert [(r["name"], r["reason"], r["attempt"]) for r in recovered] == [
            ("j", "owner gone", 2)
        ]
        (again,) = (await heir.claim(ALL, 10, 30.0, now=at(11))).jobs
        assert (again.slot, again.attempt) == (at(10), 2)
    finally:
        await heir.close()


async def test_a_slot_taken_ahead_by_a_node_that_died_before_it_is_not_run_early(
    store: JobStore, settings: ClusterSettings
) -> None:
    """A node claims a slot up to a moment ahead of its time; if it dies (or shuts down)
    before the slot comes, the slot's next attempt is due at the slot, not at once: the
    node that takes it back must not start it early."""
    spec = JobSpec.build("j", "@every 10s", "cluster.chaos.witness:record", retries=2)
    await store.definitions.add(spec, now=T0)
    doomed = await open_session(settings, "doomed")
    await doomed.try_lock(ALL)
    (ahead,) = (await doomed.claim(ALL, 10, 300.0, now=at(9.8), ahead_s=0.3)).jobs
    assert (ahead.slot, ahead.due) == (at(10), at(10))
    await doomed.close()
    await until(lambda: not _backends(settings, "doomed"), "the doomed backends to end")
    heir = await open_session(settings, "heir")
    try:
        assert await heir.try_lock(ALL) == set(ALL)
        (recovered,) = await heir.recover(ALL, ["heir"], now=at(9.9))
        assert (recovered["attempt"], recovered["next_run_at"]) == (2, at(10))
        assert (await heir.claim(ALL, 10, 30.0, now=at(9.95))).jobs == []
        (again,) = (await heir.claim(ALL, 10, 30.0, now=at(9.95), ahead_s=0.1)).jobs
        assert (again.slot, again.attempt, again.due) == (at(10), 2, at(10))
        # A node shutting down hands back a run it took ahead: due at its slot too.
        await heir.release([(again.id, again.lease_token)], "shutting down", now=at(9.96))
        (handed,) = (await heir.claim(ALL, 10, 30.0, now=at(9.97), ahead_s=0.1)).jobs
        assert (handed.attempt, handed.due) == (3, at(10))
    finally:
        await heir.close()


def _backends(settings: ClusterSettings, node_id: str, *, terminate: bool = False) -> int:
    """How many sessions named ``node_id`` this database has (ending them if asked)."""
    count = "count(pg_terminate_backend(pid))" if terminate else "count(*)"
    with psycopg.connect(settings.database_url, autocommit=True) as conn:
        row = conn.execute(
            f"SELECT {count} FROM pg_stat_activity "
            "WHERE application_name = %s AND datname = current_database()",
            (node_id,),
        ).fetchone()
    assert row is not None
    return int(row[0])


async def test_session_loss_drops_every_shard_then_reacquires(
    store: JobStore, settings: ClusterSettings
) -> None:
    state = NodeState("n1", "z", 16)
    stats = Stats()
    session = LockSession(
        settings, "n1", "z", session_timeout_s=10, statement_timeout_s=5,
        on_lost=lambda: stats.outcomes.update(dropped=state.session_untrusted()),
    )  # fmt: skip
    keeper = ShardKeeper(state, session, stats, _no_recovery, expected_shards=16)
    state.set_live(["n1"])
    await keeper.run_once()
    assert state.held == frozenset(ALL)
    first = session.generation

    # Postgres ends the lock session (a restart, an admin, idle_session_timeout...).
    assert _backends(settings, "n1", terminate=True) == 1
    with pytest.raises(SessionLost):
        await session.claim(sorted(state.held), 10, 30.0)
    assert state.held == frozenset() and not session.connected and state.reconnect
    assert stats.outcomes["dropped"] == 16

    await keeper.run_once()
    assert session.generation == first + 1
    assert state.held == frozenset(ALL)
    assert await session.my_locks() == set(ALL)
    await session.close()


async def _no_recovery(shards: frozenset[int]) -> int:
    return 0


async def test_node_without_redis_keeps_its_shards(
    store: JobStore, settings: ClusterSettings
) -> None:
    state = NodeState("n1", "z", 16)
    stats = Stats()
    session = await open_session(settings, "n1")
    keeper = ShardKeeper(state, session, stats, _no_recovery, expected_shards=16)
    info = MemberInfo("n1", "z", "host", 1, "now", "dev", 4)
    good = MemberRegistry(settings)
    await Heartbeat(good, info, state, stats, ttl_s=5).run_once()
    await keeper.run_once()
    assert state.held == frozenset(ALL)

    dead_redis = ClusterSettings(
        database_url=settings.database_url,
        redis_url="redis://127.0.0.1:1/0",
        schema=settings.schema,
        cluster=settings.cluster,
    )
    broken = MemberRegistry(dead_redis, timeout_s=0.5)
    with pytest.raises(MembershipError):
        await Heartbeat(broken, info, state, stats, ttl_s=5).run_once()
    assert stats.redis_errors == 1
    await keeper.run_once()
    assert state.live == ("n1",) and state.held == frozenset(ALL)
    for registry in (good, broken):
        await registry.close()
    await session.close()


async def test_claimer_stops_claiming_outside_its_trust_window(
    store: JobStore, settings: ClusterSettings, n1: LockSession
) -> None:
    await store.definitions.add(
        JobSpec.build("j", "@every 1s", "cluster.chaos.witness:record"), now=T0
    )
    state = NodeState("n1", "z", 16, held=frozenset(ALL))
    stats = Stats()
    clock = DbClock()
    pacing = Pacing(clock)
    completer = Completer(n1.completions, clock, stats, state.wake, pacing)
    executor = Executor(4, "n1", "z", completer.run_done)
    claimer = Claimer(
        state, n1, executor, completer, clock, stats, pacing,
        poll_interval_s=1.0, lease_s=30.0, trust_margin_s=2.0,
    )  # fmt: skip
    n1.last_ok = time.monotonic() - 9.0  # last confirmed 9 s ago; timeout 10 s, margin 2 s
    await claimer.run_once()
    assert stats.claims == 0 and state.held == frozenset() and state.reconnect
    assert stats.locks_lost == 16
    assert Counter(j.status for j in await store.jobs()) == {"idle": 1}
    executor.shutdown()
