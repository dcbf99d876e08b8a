"""Backfills against a real Postgres (``store.runcontrol.backfill`` and ``backfills.fill``, as the
node's backfiller runs it): slots are queued as flights oldest first, at most
``max_parallel`` in flight, run through ``claim_flights`` with origin ``backfill`` until the
request is done; ``only_missing`` leaves succeeded slots out; cancel drops queued slots;
bad ranges and paused jobs are refused with nothing written; a range ends at the job's own
slot; with overlap ``forbid`` a backfill slot and the job's regular slot never run at once."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from cluster.errors import InvalidInput
from cluster.jobs.spec import JobSpec
from cluster.settings import ClusterSettings
from cluster.store.connect import connection
from cluster.store.housekeeping import backfills
from cluster.store.jobstore.store import JobStore
from cluster.store.side import SideConnection
from node.handlers.context import Outcome
from node.pipeline.outcomes import after_run, plan_at_claim
from tests.helpers.sessions import Opener

T0 = datetime(2031, 3, 4, 12, 0, tzinfo=UTC)
ALL = range(16)
OK = Outcome("succeeded", None, 0.01)


async def fill(settings: ClusterSettings, now: datetime) -> int:
    async with SideConnection(settings, "n1/backfill", statement_timeout_s=5).using() as side:
        return await backfills.fill(side, ALL, now)


async def rows(settings: ClusterSettings, statement: str) -> list[dict[str, Any]]:
    async with connection(settings, "pulse-test") as conn:
        cur = await conn.execute(statement)
        return await cur.fetchall()


async def add(store: JobStore, **options: Any) -> None:
    spec = JobSpec.build("roll", "@every 1m", "shell:true", tenant="acme", **options)
    await store.definitions.add(spec, now=T0 + timedelta(days=1))


async def test_a_backfill_runs_its_slots_oldest_first_max_parallel_at_a_time(
    store: JobStore, open_session: Opener, settings: ClusterSettings
) -> None:
    await add(store)
    plan = await store.runcontrol.backfill(
        "roll", "acme", start=T0, end=T0 + timedelta(minutes=7), max_parallel=3
    )
    assert plan.backfill is not None and plan.backfill.slots_total == 7
    node = await open_session("n1")
    now, ran = T0 + timedelta(days=1), []
    while True:
        queued = await fill(settings, now)
        assert await fill(settings, now) == 0, "no room until a slot ends"
        flights = await node.flights.claim(ALL, 10, 30.0, now=now)
        assert len(flights) == queued <= 3
        if not flights:
            break
        ran += [f.slot for f in flights]
        done = [after_run(f, OK, now)[0] for f in flights]
        assert len(await node.completions.complete_flights(done, now=now)) == len(flights)
    assert ran == [T0 + timedelta(minutes=m) for m in range(7)]
    (request,) = await store.runcontrol.backfills()
    assert (request.status, request.slots_queued, request.in_flight) == ("done", 7, 0)
    runs = await store.runs("roll", "acme")
    assert sorted(r.scheduled_for for r in runs) == ran
    assert {r.origin for r in runs} == {"backfill"} and {r.status for r in runs} == {"succeeded"}


async def test_only_missing_leaves_succeeded_slots_out_and_dry_run_writes_nothing(
    store: JobStore, open_session: Opener, settings: ClusterSettings
) -> None:
    await add(store)
    node = await open_session("n1")
    await store.runcontrol.backfill("roll", "acme", start=T0, end=T0 + timedelta(minutes=2))
    now = T0 + timedelta(days=1)
    for _ in range(2):
        await fill(settings, now)
        (flight,) = await node.flights.claim(ALL, 10, 30.0, now=now)
        await node.completions.complete_flights([after_run(flight, OK, now)[0]], now=now)
    end = T0 + timedelta(minutes=5)
    dry = await store.runcontrol.backfill(
        "roll", "acme", start=T0, end=end, only_missing=True, dry_run=True
    )
    assert dry.backfill is None
    assert dry.slots == [T0 + timedelta(minutes=m) for m in (2, 3, 4)]
    assert len(await store.runcontrol.backfills()) == 1
    everything = await store.runcontrol.backfill("roll", "acme", start=T0, end=end, dry_run=True)
    assert len(everything.slots) == 5
    with pytest.raises(InvalidInput, match="has succeeded already"):
        await store.runcontrol.backfill("roll", "acme", start=T0, end=T0 + timedelta(minutes=2),
                             only_missing=True)  # fmt: skip


async def test_two_requests_over_one_range_never_run_a_slot_twice(
    store: JobStore, open_session: Opener, settings: ClusterSettings
) -> None:
    """A plain request still going when an ``--only-missing`` one over the same range is
    made: each slot runs once, whichever request reaches it first."""
    await add(store)
    node = await open_session("n1")
    now = T0 + timedelta(days=1)
    end = T0 + timedelta(minutes=4)
    await store.runcontrol.backfill("roll", "acme", start=T0, end=end, now=now)  # one at a time
    ran: list[datetime] = []

    async def run_queued() -> None:
        flights = await node.flights.claim(ALL, 10, 30.0, now=now)
        ran.extend(f.slot for f in flights)
        await node.completions.complete_flights(
            [after_run(f, OK, now)[0] for f in flights], now=now
        )

    await fill(settings, now)
    await run_queued()  # the first request ran its first slot
    await store.runcontrol.backfill(
        "roll", "acme", start=T0, end=end, only_missing=True, max_parallel=4, now=now
    )
    for _ in range(8):
        now += timedelta(seconds=1)
        await fill(settings, now)
        await run_queued()
    assert sorted(ran) == [T0 + timedelta(minutes=m) for m in range(4)]  # each once
    assert {b.status for b in await store.runcontrol.backfills()} == {"done"}


async def test_cancel_drops_queued_slots_and_running_ones_finish(
    store: JobStore, open_session: Opener, settings: ClusterSettings
) -> None:
    await add(store)
    plan = await store.runcontrol.backfill(
        "roll", "acme", start=T0, end=T0 + timedelta(hours=1), max_parallel=4
    )
    assert plan.backfill is not None
    now = T0 + timedelta(days=1)
    assert await fill(settings, now) == 4
    node = await open_session("n1")
    running = await node.flights.claim(ALL, 2, 30.0, now=now)
    cancelled = await store.runcontrol.cancel_backfill(plan.backfill.id)
    assert (cancelled.status, cancelled.in_flight) == ("cancelled", 2)
    left = await rows(settings, "SELECT status FROM flights")
    assert [r["status"] for r in left] == ["running", "running"]
    assert await fill(settings, now) == 0
    done = [after_run(f, OK, now)[0] for f in running]
    assert len(await node.completions.complete_flights(done, now=now)) == 2
    assert (await store.runcontrol.cancel_backfill(plan.backfill.id)).status == "cancelled"
    with pytest.raises(InvalidInput, match="no backfill 999"):
        await store.runcontrol.cancel_backfill(999)


async def test_a_range_that_reaches_the_jobs_slot_ends_there(
    store: JobStore, open_session: Opener, settings: ClusterSettings
) -> None:
    """The job's slot, due and not yet claimed, and the slots after it are the schedule's:
    a backfill that ran them would be followed by the job's own run of each, replacing its
    record. So the request ends at the job's slot."""
    await add(store)
    slot = (await store.get("roll", "acme")).slot_at
    now = slot + timedelta(seconds=20)  # due: no node has claimed it yet
    ask = {"start": slot - timedelta(minutes=3), "end": slot + timedelta(minutes=5), "now": now}
    dry = await store.runcontrol.backfill("roll", "acme", dry_run=True, **ask)
    passed = [slot - timedelta(minutes=m) for m in (3, 2, 1)]
    assert (dry.slots, dry.cut_at) == (passed, slot)
    plan = await store.runcontrol.backfill("roll", "acme", max_parallel=10, **ask)
    assert plan.backfill is not None and plan.cut_at == slot
    assert (plan.backfill.range_to, plan.backfill.slots_total) == (slot, 3)
    assert await fill(settings, now) == 3
    node = await open_session("n1")
    flights = await node.flights.claim(ALL, 10, 30.0, now=now)
    assert sorted(f.slot for f in flights) == passed
    whole = await store.runcontrol.backfill(
        "roll", "acme", start=slot - timedelta(minutes=3), end=slot, dry_run=True
    )
    assert whole.cut_at is None
    with pytest.raises(InvalidInput, match="before the job's slot"):
        await store.runcontrol.backfill(
            "roll", "acme", start=slot - timedelta(seconds=30), end=slot + timedelta(minutes=5)
        )
    with pytest.raises(InvalidInput, match="has not passed"):
        await store.runcontrol.backfill("roll", "acme", start=slot, end=slot + timedelta(hours=1))
    assert len(await store.runcontrol.backfills()) == 1


@pytest.mark.parametrize(
    ("start", "end", "message"),
    [
        (T0, T0, "must be after --from"),
        (T0, T0 - timedelta(hours=1), "must be after --from"),
        (T0 + timedelta(seconds=1), T0 + timedelta(seconds=59), "holds no slot"),
        (T0 - timedelta(days=70), T0, "more than 100,000 slots"),
        (T0 + timedelta(days=2), T0 + timedelta(days=3), "has not passed"),
    ],
)
async def test_bad_ranges_are_refused_with_nothing_written(
    store: JobStore, start: datetime, end: datetime, message: str
) -> None:
    await add(store)
    with pytest.raises(InvalidInput, match=message):
        await store.runcontrol.backfill("roll", "acme", start=start, end=end)
    with pytest.raises(InvalidInput, match="max_parallel"):
        await store.runcontrol.backfill(
            "roll", "acme", start=T0, end=T0 + timedelta(hours=1), max_parallel=0
        )
    await store.pause("roll", "acme")
    with pytest.raises(InvalidInput, match="is paused"):
        await store.runcontrol.backfill("roll", "acme", start=T0, end=T0 + timedelta(hours=1))
    assert await store.runcontrol.backfills() == []


async def test_forbid_keeps_backfill_and_regular_slots_apart(
    store: JobStore, open_session: Opener, settings: ClusterSettings
) -> None:
    await add(store)
    await store.runcontrol.backfill("roll", "acme", start=T0, end=T0 + timedelta(minutes=2))
    node = await open_session("n1")
    due = T0 + timedelta(days=2)  # the regular slot is due too
    (regular,) = (await node.claim(ALL, 10, 30.0, now=due)).jobs
    assert await fill(settings, due) == 1
    assert await node.flights.claim(ALL, 10, 30.0, now=due) == [], "waits for the regular slot"
    await node.completions.complete([after_run(regular, OK, due)[0]], now=due)
    (flight,) = await node.flights.claim(ALL, 10, 30.0, now=due)
    later = due + timedelta(days=1)
    assert (await node.claim(ALL, 10, 30.0, now=later)).jobs == [], "waits for the backfill"
    await node.completions.complete_flights([after_run(flight, OK, later)[0]], now=later)
    assert len((await node.claim(ALL, 10, 30.0, now=later)).jobs) == 1


async def test_runs_say_why_their_slot_ran(store: JobStore, open_session: Opener) -> None:
    spec = JobSpec.build("tick", "@every 1m", "shell:true", catch_up="once")
    await store.definitions.add(spec, now=T0)
    node = await open_session("n1")
    late = T0 + timedelta(minutes=5, seconds=10)  # slots 12:01..12:05 are due
    (job,) = (await node.claim(ALL, 10, 30.0, now=late)).jobs
    planned = plan_at_claim(job, late)
    assert planned is not None  # 12:01..12:04 skipped, 12:05 runs as catch-up
    await node.completions.complete([planned[0]], planned[1], now=late)
    (job,) = (await node.claim(ALL, 10, 30.0, now=late)).jobs
    assert job.slot == T0 + timedelta(minutes=5)
    await node.completions.complete([after_run(job, OK, late)[0]], now=late)
    triggered = await store.trigger("tick", now=late + timedelta(seconds=1))
    (job,) = (await node.claim(ALL, 10, 30.0, now=late + timedelta(seconds=1))).jobs
    await node.completions.complete([after_run(job, OK, late)[0]], now=late + timedelta(seconds=2))
    (job,) = (await node.claim(ALL, 10, 30.0, now=T0 + timedelta(minutes=6))).jobs
    await node.completions.complete([after_run(job, OK, late)[0]], now=T0 + timedelta(minutes=6))
    origins = {(r.scheduled_for, r.status): r.origin for r in await store.runs("tick")}
    assert origins[(T0 + timedelta(minutes=5), "succeeded")] == "catch-up"
    assert origins[(triggered.slot_at, "succeeded")] == "trigger"
    assert origins[(T0 + timedelta(minutes=6), "succeeded")] == "schedule"
    assert origins[(T0 + timedelta(minutes=1), "skipped")] == "schedule"


async def test_a_released_or_recovered_attempt_keeps_its_slots_origin(
    store: JobStore, open_session: Opener
) -> None:
    """A triggered slot's attempt lost at a shutdown (release) and again with its node
    (recover) is recorded ``lost`` with origin ``trigger``, not as a scheduled slot."""
    await store.definitions.add(JobSpec.build("tick", "@daily", "shell:true", retries=3), now=T0)
    triggered = await store.trigger("tick", now=T0)
    n1 = await open_session("n1")
    (job,) = (await n1.claim(ALL, 10, 30.0, now=T0)).jobs
    assert await n1.release([(job.id, job.lease_token)], "shutting down", now=T0) == {job.id}
    (run,) = await store.runs("tick")
    assert (run.scheduled_for, run.status, run.origin) == (triggered.slot_at, "lost", "trigger")
    (job,) = (await n1.claim(ALL, 10, 30.0, now=T0)).jobs
    n2 = await open_session("n2")
    later = T0 + timedelta(minutes=5)  # n1's lease has expired
    assert len(await n2.recover(ALL, ["n2"], now=later)) == 1
    (run,) = await store.runs("tick")
    assert (run.status, run.attempt, run.origin) == ("lost", 2, "trigger")


async def test_a_backfill_of_a_gated_job_runs_each_slot_after_its_upstreams(
    store: JobStore, open_session: Opener, settings: ClusterSettings
) -> None:
    made = T0 + timedelta(days=1)
    specs = [
        JobSpec.build("extract", "@every 1m", "shell:true", tenant="acme"),
        JobSpec.build("load", "@every 1m", "shell:true", tenant="acme", after="extract"),
    ]
    await store.definitions.apply(specs, now=made)
    for name in ("load", "extract"):  # the downstream first: its slots still wait
        end = T0 + timedelta(minutes=3)
        await store.runcontrol.backfill(name, "acme", start=T0, end=end, max_parallel=3)
    node = await open_session("n1")
    batch: dict[tuple[str, datetime], int] = {}  # (job, slot) -> the claim that took it
    while True:
        await fill(settings, made)
        flights = await node.flights.claim(ALL, 10, 30.0, now=made)
        if not flights:
            break
        batch.update({(f.name, f.slot): len(set(batch.values())) for f in flights})
        done = [after_run(f, OK, made)[0] for f in flights]
        await node.completions.complete_flights(done, now=made)
    slots = [T0 + timedelta(minutes=m) for m in range(3)]
    assert sorted(batch) == sorted([("extract", s) for s in slots] + [("load", s) for s in slots])
    # Each slot of load was claimed only after the claim that ran extract's slot ended.
    assert all(batch[("extract", s)] < batch[("load", s)] for s in slots), batch
