"""Expectations of runs: the late pass raises ``slow`` (past --expect-max, or past
--expect-baseline times the p95 of the job's kept runs) and ``overdue`` (past --deadline, wall
clock in the job's zone) while a run goes on; the completion raises ``too_fast`` and
``assertion_failed``. Each once per run, however many nodes run the pass at once, and the
job's health follows. Explicit ``now``."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from typing import Any

import pytest

from cluster.jobs.spec import JobSpec
from cluster.settings import ClusterSettings
from cluster.store.connect import connect
from cluster.store.housekeeping.alerts import AlertStore
from cluster.store.jobstore.store import JobStore
from cluster.store.lock.records import ClaimedJob
from cluster.store.lock.session import LockSession
from cluster.store.side import SideConnection
from node.handlers.context import Outcome
from node.maintenance.lateness import LatePass
from node.pipeline.checks import checked
from node.pipeline.outcomes import after_run
from node.stats import Stats
from tests.helpers.flights import ended, handed
from tests.helpers.outbox import ALL, HANDLER, T0, add_rule, at, events, every_10s
from tests.helpers.plans import FILL, job_scans, plan_of
from tests.helpers.sessions import Opener

pytestmark = pytest.mark.timeout(60)
HOOK = "http://127.0.0.1:9/hook"
EXPECT_EVENTS = "slow,overdue,too_fast,assertion_failed,failed"


async def claim_one(node: LockSession, now: datetime) -> ClaimedJob:
    (job,) = (await node.claim(ALL, 50, 30.0, now=now)).jobs
    return job


async def finish(
    node: LockSession,
    job: ClaimedJob,
    now: datetime,
    duration_s: float,
    metrics: dict[str, float] | None = None,
) -> None:
    """Complete ``job`` as the node's completer does: checks, then the completion plan."""
    outcome, why = checked(job, Outcome("succeeded", None, duration_s, None, None, metrics))
    done, skips = after_run(job, outcome, now)
    done = done._replace(assertion=why)
    assert await node.completions.complete([done], skips, now=now) == {job.id}


async def kinds(settings: ClusterSettings) -> list[tuple[str, str, datetime | None]]:
    return [(e["event"], e["job_name"], e["slot"]) for e in await events(settings)]


async def health(store: JobStore, name: str) -> dict[str, Any]:
    return (await store.get(name)).health()


async def test_a_run_past_expect_max_raises_slow_once_across_nodes(
    store: JobStore, settings: ClusterSettings, open_session: Opener
) -> None:
    await store.definitions.apply([every_10s("a", expect_max="5s"), every_10s("plain")], now=T0)
    await add_rule(settings, "ops", HOOK, events=EXPECT_EVENTS)
    node = await open_session("n1")
    (job, plain) = sorted((await node.claim(ALL, 50, 30.0, now=at(10))).jobs, key=lambda j: j.name)
    passes = [
        LatePass(
            AlertStore(SideConnection(settings, f"n{i}/alerts", statement_timeout_s=5)), 16, Stats()
        )
        for i in range(4)
    ]
    try:
        await passes[0].run_once(now=at(14.9))
        assert await events(settings) == []
        # Four nodes at once, then again: one event.
        await asyncio.gather(*(p.run_once(now=at(16)) for p in passes))
        await asyncio.gather(*(p.run_once(now=at(25)) for p in passes))
        assert await kinds(settings) == [("slow", "a", at(10))]
        (event,) = await events(settings)
        assert (event["node_id"], event["attempt"]) == ("n1", 1)
        assert event["detail"] == "running for 6s (expected at most 5s)"
        state = await health(store, "a")
        assert (state["state"], state["state_at"]) == ("slow", at(16).isoformat())
        assert (await health(store, "plain"))["state"] is None
        # It ends: the state stays slow until a run meets the expectations.
        await finish(node, job, at(26), 16.0)
        await finish(node, plain, at(26), 16.0)
        assert (await health(store, "a"))["state"] == "slow"
        second = {j.name: j for j in (await node.claim(ALL, 50, 30.0, now=at(30))).jobs}
        await finish(node, second["a"], at(31), 1.0)
        state = await health(store, "a")
        assert (state["state"], state["state_at"], state["last_success"]) == (
            "ok",
            at(31).isoformat(),
            second["a"].slot.isoformat(),
        )
        await passes[1].run_once(now=at(45))
    finally:
        for p in passes:
            await p._store.close()
    assert await kinds(settings) == [("slow", "a", at(10))]


async def test_a_deadline_is_wall_clock_in_the_jobs_zone_across_a_dst_change(
    store: JobStore, settings: ClusterSettings, open_session: Opener
) -> None:
    # Berlin moves to summer time at 02:00 on 29 March 2026: the 06:00 deadline of the
    # 23:00 slot of the 28th is 04:00 UTC, not the 05:00 UTC seven hours would give.
    day = datetime(2026, 3, 28, 21, 0, tzinfo=UTC)
    spec = JobSpec.build("nightly", "0 23 * * *", HANDLER, tz="Europe/Berlin", deadline="6:00")
    assert spec.deadline == "06:00"
    await store.definitions.apply([spec], now=day)
    await add_rule(settings, "ops", HOOK, events=EXPECT_EVENTS)
    node = await open_session("n1")
    job = await claim_one(node, datetime(2026, 3, 28, 22, 0, tzinfo=UTC))
    assert job.slot == datetime(2026, 3, 28, 22, 0, tzinfo=UTC)
    async with AlertStore.open(settings, "n9/alerts") as alerts:
        late = LatePass(alerts, 16, Stats())
        await late.run_once(now=datetime(2026, 3, 29, 3, 59, 59, tzinfo=UTC))
        assert await events(settings) == []
        await late.run_once(now=datetime(2026, 3, 29, 4, 0, 1, tzinfo=UTC))
        await late.run_once(now=datetime(2026, 3, 29, 5, 0, 1, tzinfo=UTC))
    (event,) = await events(settings)
    assert (event["event"], event["slot"]) == ("overdue", job.slot)
    assert event["detail"] == "still running at its 06:00 deadline (Europe/Berlin)"
    assert (await health(store, "nightly"))["state"] == "overdue"


async def test_a_run_over_its_baseline_raises_slow_once_it_has_enough_runs(
    store: JobStore, settings: ClusterSettings, open_session: Opener
) -> None:
    await store.definitions.apply([every_10s("b", expect_baseline="3x")], now=T0)
    await add_rule(settings, "ops", HOOK, events=EXPECT_EVENTS)
    node = await open_session("n1")
    async with AlertStore.open(settings, "n9/alerts") as alerts:
        late = LatePass(alerts, 16, Stats())
        for i, took in enumerate([1.0, 1.0, 2.0, 1.0]):
            job = await claim_one(node, at(10 * (i + 1)))
            # Four kept runs are too few for a baseline, however long this one goes on.
            await late.run_once(now=at(10 * (i + 1) + 9))
            await finish(node, job, at(10 * (i + 1) + took), took)
        assert await events(settings) == []
        job = await claim_one(node, at(50))
        await finish(node, job, at(51), 1.0)
        job = await claim_one(node, at(60))
        # p95 of 1, 1, 2, 1, 1 is 1.8 s: slow after 5.4 s.
        await late.run_once(now=at(65.3))
        assert await events(settings) == []
        await late.run_once(now=at(65.5))
        await late.run_once(now=at(69))
    (event,) = await events(settings)
    assert (event["event"], event["slot"]) == ("slow", at(60))
    assert "over 3x the p95 (1.8s) of its last 5 successful runs" in event["detail"]


async def test_a_run_that_ends_too_soon_raises_too_fast_from_its_completion(
    store: JobStore, settings: ClusterSettings, open_session: Opener
) -> None:
    await store.definitions.apply([every_10s("f", expect_min="30s", expect_max="1m")], now=T0)
    await add_rule(settings, "ops", HOOK, events=EXPECT_EVENTS)
    node = await open_session("n1")
    await finish(node, await claim_one(node, at(10)), at(11), 0.25)
    (event,) = await events(settings)
    assert (event["event"], event["slot"], event["node_id"]) == ("too_fast", at(10), "n1")
    assert event["detail"] == "ended after 0.25s (expected at least 30s)"
    state = await health(store, "f")
    assert (state["state"], state["state_at"]) == ("too_fast", at(11).isoformat())
    await finish(node, await claim_one(node, at(20)), at(55), 35.0)
    assert (await health(store, "f"))["state"] == "ok"
    assert len(await events(settings)) == 1


async def test_metrics_failing_an_assert_raise_assertion_failed_or_fail_the_run(
    store: JobStore, settings: ClusterSettings, open_session: Opener
) -> None:
    await store.definitions.apply(
        [
            every_10s("rows", asserts="rows > 0 and errors == 0"),
            every_10s("strict", asserts="rows>0", assert_fails=True),
        ],
        now=T0,
    )
    await add_rule(settings, "ops", HOOK, events=EXPECT_EVENTS)
    node = await open_session("n1")
    first = {j.name: j for j in (await node.claim(ALL, 50, 30.0, now=at(10))).jobs}
    assert first["rows"].asserts == "rows > 0 and errors == 0"
    await finish(node, first["rows"], at(11), 0.1, {"rows": 0.0, "errors": 0.0})
    await finish(node, first["strict"], at(11), 0.1, {"rows": 0.0})
    assert [
        (e["event"], e["job_name"], e["detail"], e["error"]) for e in await events(settings)
    ] == [
        ("assertion_failed", "rows", "assertion failed: rows > 0 (rows=0)", None),
        ("failed", "strict", None, "assertion failed: rows > 0 (rows=0)"),
    ]
    (run,) = await store.runs("strict")
    assert (run.status, run.last_error) == ("failed", "assertion failed: rows > 0 (rows=0)")
    assert (await health(store, "rows"))["state"] == "assertion_failed"
    second = {j.name: j for j in (await node.claim(ALL, 50, 30.0, now=at(20))).jobs}
    await finish(node, second["rows"], at(21), 0.1, {"rows": 3.0, "errors": 0.0})
    assert (await health(store, "rows"))["state"] == "ok"
    assert len(await events(settings)) == 2


async def test_a_flight_past_expect_max_raises_slow_once(
    store: JobStore, settings: ClusterSettings, open_session: Opener
) -> None:
    spec = JobSpec.build(
        "fan", "@every 10s", HANDLER, overlap="allow", max_concurrent=2, expect_max="5s"
    )
    await store.definitions.apply([spec], now=T0)
    await add_rule(settings, "ops", HOOK, events=EXPECT_EVENTS)
    node = await open_session("n1")
    # Each slot is handed to a flight as soon as it is claimed: both run side by side.
    first = await claim_one(node, at(10))
    await node.completions.spawn([handed(first, at(20))], [], 30.0, now=at(10))
    second = await claim_one(node, at(20))
    await node.completions.spawn([handed(second, at(30))], [], 30.0, now=at(20))
    async with AlertStore.open(settings, "n9/alerts") as alerts:
        late = LatePass(alerts, 16, Stats())
        await late.run_once(now=at(16))  # the flight of 10 s only
        assert await kinds(settings) == [("slow", "fan", at(10))]
        await late.run_once(now=at(26))
        await late.run_once(now=at(27))
    assert sorted(await kinds(settings)) == [("slow", "fan", at(10)), ("slow", "fan", at(20))]
    assert (await health(store, "fan"))["state"] == "slow"
    done = await node.completions.complete_flights([ended(first), ended(second)], now=at(28))
    assert done == {(first.id, at(10)), (first.id, at(20))}


@pytest.mark.new_schema
async def test_the_expectations_probe_reads_only_jobs_with_expectations(
    store: JobStore, settings: ClusterSettings
) -> None:
    conn = await connect(settings, "n1")
    try:
        await conn.execute(FILL, {"n": 3000, "t0": T0})
        await conn.execute("VACUUM ANALYZE jobs")
        plan = await plan_of(conn, "expect_runs", {"baseline_runs": 1000, "now": at(120)})
    finally:
        await conn.close()
    scans = job_scans(plan)
    assert scans and all(i == "jobs_expecting" for _, i in scans), scans
