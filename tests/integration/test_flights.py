"""Flights in Postgres, the slots of overlap ``allow`` jobs each under a lease of its own:
a claim hands its slot to a flight while the job has room (``spawn``), a job at its limit
waits; a flight completes, is retried after its backoff (``claim_flights``), renewed,
released, taken back from a dead owner or, poison or cancelled, handed over to be ended;
every write is fenced on the flight's own token."""

from __future__ import annotations

import pytest

from cluster.errors import InvalidInput
from cluster.jobs.spec import JobSpec
from cluster.store.jobstore.store import JobStore
from cluster.store.lock.records import ClaimedJob
from cluster.store.lock.session import LockSession
from tests.helpers.flights import HANDLER, allow_job, ended, flights, handed
from tests.helpers.sessions import ALL, Opener, at, run_rows


async def claim_and_spawn(a: LockSession, t: float) -> tuple[ClaimedJob, bool]:
    (job,) = (await a.claim(ALL, 10, 30.0, now=at(t))).jobs
    assert job.overlap == "allow" and not job.flight
    moved = await a.completions.spawn([handed(job, at(t + 10))], [], 30.0, now=at(t))
    return job, moved[job.id]


async def first_flight(
    store: JobStore, open_session: Opener, retries: int = 3
) -> tuple[LockSession, ClaimedJob]:
    """The allow job applied, and node-a's session with the job's first slot (due at 10)
    handed to a flight."""
    await allow_job(store, retries=retries)
    a = await open_session("node-a")
    first, room = await claim_and_spawn(a, 10)
    assert room
    return a, first


async def test_slots_run_side_by_side_up_to_the_limit(
    store: JobStore, open_session: Opener
) -> None:
    a, first = await first_flight(store, open_session)
    job = await store.get("fan")
    assert (job.status, job.slot_at, job.locked_by) == ("idle", at(20), None)
    _second, room = await claim_and_spawn(a, 20)
    assert room
    assert await flights(store) == [
        (at(10), "running", 1, "node-a"),
        (at(20), "running", 1, "node-a"),
    ]
    # At its limit: the job keeps its slot, due again in a second.
    third, room = await claim_and_spawn(a, 30)
    assert not room
    job = await store.get("fan")
    assert (job.status, job.slot_at, job.next_run_at) == ("idle", at(30), at(31))
    assert len(await flights(store)) == 2

    # A flight's completion is fenced on its own token, and frees a place.
    stale = ended(first)._replace(token=first.lease_token + 1)
    assert await a.completions.complete_flights([stale], now=at(31)) == set()
    assert await a.completions.complete_flights([ended(first)], now=at(31)) == {(first.id, at(10))}
    assert await run_rows(store, "fan") == [  # a flight in flight is listed as running
        (at(10), "succeeded", "node-a", 1),
        (at(20), "running", "node-a", 1),
    ]
    third, room = await claim_and_spawn(a, 31)
    assert room and third.slot == at(30)
    assert [f[0] for f in await flights(store)] == [at(20), at(30)]


async def test_cancel_names_a_flight_renewal_reports_it(
    store: JobStore, open_session: Opener
) -> None:
    a, first = await first_flight(store, open_session)
    second, _ = await claim_and_spawn(a, 20)
    with pytest.raises(InvalidInput, match="2 slots of 'fan' are running"):
        await store.runcontrol.cancel("fan", by="ops")
    (asked,) = await store.runcontrol.cancel("fan", by="ops", slot=at(20))
    assert asked.slot == at(20)
    leases = [(f.id, f.slot, f.lease_token) for f in (first, second)]
    assert await a.flights.renew(leases, 30.0, now=at(21)) == {
        (first.id, at(10)): None,
        (second.id, at(20)): "ops",
    }
    assert len(await store.runcontrol.cancel("fan", by="ops", every=True)) == 2


async def test_a_failed_flight_waits_out_its_backoff_then_is_claimed_again(
    store: JobStore, open_session: Opener
) -> None:
    a, first = await first_flight(store, open_session)
    assert await a.completions.complete_flights([ended(first, "failed", at(25))], now=at(15))
    assert await flights(store) == [(at(10), "queued", 2, None)]
    assert await run_rows(store, "fan") == [(at(10), "failed", "node-a", 1)]
    assert await a.flights.claim(ALL, 10, 30.0, now=at(24)) == []
    (again,) = await a.flights.claim(ALL, 10, 30.0, now=at(25))
    assert (again.flight, again.slot, again.attempt) == (True, at(10), 2)
    assert again.lease_token == first.lease_token + 1
    assert await a.completions.complete_flights([ended(again)], now=at(26)) == {(first.id, at(10))}
    assert await run_rows(store, "fan") == [(at(10), "succeeded", "node-a", 2)]
    assert await flights(store) == []


async def test_a_dead_owners_flight_is_queued_again_or_handed_over_when_poison(
    store: JobStore, open_session: Opener
) -> None:
    a, first = await first_flight(store, open_session, retries=1)
    b = await open_session("node-b")
    (back,) = await b.flights.recover(ALL, ["node-b"], now=at(50))  # a's lease ended at 40
    assert not back.poison and back.reason == "lease expired"
    assert await flights(store) == [(at(10), "queued", 2, None)]
    assert await run_rows(store, "fan") == [(at(10), "lost", "node-a", 1)]
    # a's late completion is fenced; b claims the retry, and dies too: its last attempt.
    assert await a.completions.complete_flights([ended(first)], now=at(51)) == set()
    (_retry,) = await b.flights.claim(ALL, 10, 30.0, now=at(51))
    c = await open_session("node-c")
    (poison,) = await c.flights.recover(ALL, ["node-c"], now=at(90))
    assert poison.poison and poison.job.attempt == 2
    assert await flights(store) == [(at(10), "running", 2, "node-c")]
    assert await c.completions.complete_flights([ended(poison.job, "failed")], now=at(91))
    assert await flights(store) == []


async def test_released_flights_are_due_again_at_once(
    store: JobStore, open_session: Opener
) -> None:
    a, first = await first_flight(store, open_session)
    lease = (first.id, first.slot, first.lease_token)
    assert await a.flights.release([lease], "node shut down", now=at(12)) == {(first.id, at(10))}
    assert await flights(store) == [(at(10), "queued", 2, None)]
    b = await open_session("node-b")
    (again,) = await b.flights.claim(ALL, 10, 30.0, now=at(12))
    assert again.attempt == 2


async def test_a_flight_records_the_revision_its_slot_was_claimed_under(
    store: JobStore, open_session: Opener
) -> None:
    a, first = await first_flight(store, open_session)
    # Changed while the flight runs: its run keeps revision 1, the next slot's gets 2.
    await store.definitions.apply(
        [JobSpec.build("fan", "@every 10s", HANDLER, overlap="allow", max_concurrent=2,
                       retries=3, timeout="2m")],
        now=at(15),
    )  # fmt: skip
    second, _ = await claim_and_spawn(a, 20)
    done = [ended(first), ended(second)]
    assert len(await a.completions.complete_flights(done, now=at(25))) == 2
    cur = await store.db.conn.execute("SELECT scheduled_for, revision FROM runs ORDER BY 1")
    assert [(r["scheduled_for"], r["revision"]) for r in await cur.fetchall()] == [
        (at(10), 1),
        (at(20), 2),
    ]
