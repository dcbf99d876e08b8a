"""Per-tenant limits of concurrent runs (migration 014, docs/design/fairness.md): the claim
takes no more of a tenant's slots than it has free places across every session, a place
comes back with every way a run ends, a tenant at its limit hides no other tenant's jobs,
and setting a limit counts the runs already in flight; `pulse audit` finds a slot held by
its tenant's limit waiting."""

from __future__ import annotations

import asyncio
from collections import Counter

import psycopg
import pytest

from cluster.errors import InvalidInput
from cluster.jobs.spec import JobSpec
from cluster.settings import ClusterSettings
from cluster.store import notify
from cluster.store.jobstore.store import JobStore
from cluster.store.lock.records import ClaimedJob
from cluster.store.lock.session import LockSession
from cluster.store.observe.audit import Scope, audit_lines
from tests.helpers.flights import ended, handed
from tests.helpers.sessions import ALL, T0, Opener, at, completion

HANDLER = "cluster.chaos.witness:record"


async def add(store: JobStore, tenant: str, count: int, **options: object) -> None:
    """``count`` jobs of ``tenant``, due at 10 s (the ones added first a little earlier)."""
    specs = [
        JobSpec.build(f"{tenant}-{i:03d}", "@every 10s", HANDLER, tenant=tenant, **options)
        for i in range(count)
    ]
    await store.definitions.apply(specs, now=T0)


async def in_flight(store: JobStore, tenant: str) -> int:
    cur = await store.db.conn.execute(  # the test reads the tables as they are
        "SELECT (SELECT count(*) FROM jobs WHERE tenant_id = %(t)s AND status = 'running')"
        " + (SELECT count(*) FROM flights f JOIN jobs j ON j.id = f.job_id"
        "    WHERE j.tenant_id = %(t)s AND f.status = 'running') AS n",
        {"t": tenant},
    )
    row = await cur.fetchone()
    assert row is not None
    return int(row["n"])


async def running(store: JobStore, tenant: str) -> int:
    (limit,) = await store.tenants.limits(tenant)
    assert limit.running == await in_flight(store, tenant)  # the count kept is exact
    return limit.running


def by_tenant(jobs: list[ClaimedJob]) -> Counter[str]:
    return Counter(j.tenant for j in jobs)


async def test_a_claim_takes_no_more_of_a_tenant_than_its_limit(
    store: JobStore, open_session: Opener
) -> None:
    await add(store, "a", 6)
    await add(store, "b", 3)
    await store.tenants.set_limit("a", 2)
    n1, n2 = await open_session("n1"), await open_session("n2")
    await n1.try_lock(ALL[:8])
    await n2.try_lock(ALL[8:])
    first = await n1.claim(ALL[:8], 20, 30.0, now=at(15))
    second = await n2.claim(ALL[8:], 20, 30.0, now=at(15))
    taken = first.jobs + second.jobs
    assert by_tenant(taken)["a"] == 2 and by_tenant(taken)["b"] == 3
    assert first.held or second.held  # a's other due jobs were passed over
    assert await running(store, "a") == 2
    # A run that ends gives its place back, and the next claim takes one more of a.
    done = next(j for j in taken if j.tenant == "a")
    owner = n1 if done in first.jobs else n2
    assert await owner.completions.complete([completion(done, at(16))], now=at(16)) == {done.id}
    assert await running(store, "a") == 1
    again = await n1.claim(ALL[:8], 20, 30.0, now=at(17))
    again2 = await n2.claim(ALL[8:], 20, 30.0, now=at(17))
    assert by_tenant(again.jobs + again2.jobs) == {"a": 1}
    assert await running(store, "a") == 2


async def test_claims_at_the_same_moment_never_exceed_the_limit(
    store: JobStore, open_session: Opener
) -> None:
    await add(store, "a", 40)
    await store.tenants.set_limit("a", 5)
    sessions = [await open_session(f"n{i}") for i in range(4)]
    for s in sessions:
        await s.try_lock(ALL[sessions.index(s) :: 4])
    held: list[tuple[LockSession, ClaimedJob]] = []
    for round_ in range(12):
        now = at(15 + round_)
        results = await asyncio.gather(
            *(s.claim(ALL[i::4], 10, 30.0, now=now) for i, s in enumerate(sessions))
        )
        for s, result in zip(sessions, results, strict=True):
            held.extend((s, j) for j in result.jobs)
        assert await in_flight(store, "a") <= 5
        assert await running(store, "a") == len(held)
        # Two of the runs end between rounds, on whichever sessions hold them.
        for s, job in held[:2]:
            await s.completions.complete([completion(job, now)], now=now)
        held = held[2:]
    # The places are taken again as they come back (a claim that found the tenant's row
    # held by another claim took none of its jobs, and the next one does).
    for i, s in enumerate(sessions):
        await s.claim(ALL[i::4], 10, 30.0, now=at(30))
    assert await in_flight(store, "a") == 5


# Which rows a plain claim reads follows its plan: on an emptied schema, whose indexes keep
# the pages earlier tests grew them to, the planner may read b's too.
@pytest.mark.new_schema
async def test_a_tenant_at_its_limit_hides_no_other_tenant(
    store: JobStore, open_session: Opener
) -> None:
    # a's jobs are older than b's, and every shard's oldest: a plain claim of 8 over 16
    # shards reads each shard's 2 oldest (its quota), so only a's while every shard holds 2
    # of a's. Shards follow the jobs' random ids: with 120 jobs of a, some shard held fewer
    # about one run in 16; with 400, about one in 370 million.
    await add(store, "a", 400)
    await store.definitions.apply(
        [JobSpec.build(f"b-{i}", "@every 20s", HANDLER, tenant="b") for i in range(4)], now=T0
    )
    await store.tenants.set_limit("a", 1)
    n1 = await open_session("n1")
    await n1.try_lock(ALL)
    plain = await n1.claim(ALL, 8, 30.0, now=at(25))
    assert by_tenant(plain.jobs) == {"a": 1} and plain.held
    fair = await n1.claim(ALL, 8, 30.0, now=at(25), fair=True)
    assert by_tenant(fair.jobs) == {"b": 4}


async def test_a_limit_set_while_runs_are_in_flight_counts_them(
    store: JobStore, open_session: Opener
) -> None:
    await add(store, "a", 5)
    n1 = await open_session("n1")
    await n1.try_lock(ALL)
    claimed = (await n1.claim(ALL, 3, 30.0, now=at(15))).jobs
    limit = await store.tenants.set_limit("a", 2)
    assert (limit.max_concurrent, limit.running) == (2, 3)
    assert (await n1.claim(ALL, 10, 30.0, now=at(16))).jobs == []
    # Two runs end: one place is free again (3 - 2 = 1 < 2).
    await n1.completions.complete([completion(j, at(17)) for j in claimed[:2]], now=at(17))
    assert await running(store, "a") == 1
    assert len((await n1.claim(ALL, 10, 30.0, now=at(18))).jobs) == 1
    # Lifting the limit lets the rest run.
    await store.tenants.clear_limit("a")
    assert await store.tenants.limits() == []
    assert len((await n1.claim(ALL, 10, 30.0, now=at(19))).jobs) == 1
    assert await in_flight(store, "a") == 3


async def test_every_way_a_run_ends_gives_its_place_back(
    store: JobStore, open_session: Opener
) -> None:
    await add(store, "a", 4, retries=3)
    await store.tenants.set_limit("a", 4)
    n1 = await open_session("n1")
    await n1.try_lock(ALL)
    one, two, three, four = (await n1.claim(ALL, 10, 30.0, now=at(15))).jobs
    assert await running(store, "a") == 4
    await n1.completions.complete([completion(one, at(16))], now=at(16))  # ends
    await n1.release([(two.id, two.lease_token)], "node stopping", now=at(16))  # given back
    await store.remove(three.name, "a")  # removed while it runs
    assert await running(store, "a") == 1
    # The node dies: another takes its slot back.
    other = await open_session("n2")
    assert [r["id"] for r in await other.recover(ALL, ["n2"], now=at(60))] == [four.id]
    assert await running(store, "a") == 0


async def test_flights_hold_places_from_their_claim_to_their_end(
    store: JobStore, open_session: Opener
) -> None:
    await store.definitions.apply(
        [JobSpec.build("fan", "@every 10s", HANDLER, tenant="a", overlap="allow",
                       max_concurrent=5, retries=3)],
        now=T0,
    )  # fmt: skip
    await store.tenants.set_limit("a", 2)
    n1 = await open_session("n1")
    await n1.try_lock(ALL)
    # Each slot's claim takes a place, and its flight keeps it.
    handed_flights = []
    for t in (10, 20):
        (job,) = (await n1.claim(ALL, 10, 30.0, now=at(t))).jobs
        assert (await n1.completions.spawn([handed(job, at(t + 10))], [], 30.0, now=at(t)))[job.id]
        assert await running(store, "a") == t // 10
        handed_flights.append(job)
    first = handed_flights[0]
    # At the limit, the third slot is not claimed at all.
    third = await n1.claim(ALL, 10, 30.0, now=at(30))
    assert third.jobs == [] and third.held
    # A flight's failed attempt queues a retry and gives its place back; the retry takes one
    # again when it is claimed, and its end gives it back for good.
    await n1.completions.complete_flights([ended(first, "failed", at(31))], now=at(31))
    assert await running(store, "a") == 1
    (retry,) = await n1.flights.claim(ALL, 10, 30.0, now=at(32))
    assert retry.slot == first.slot
    assert await running(store, "a") == 2
    await n1.completions.complete_flights([ended(retry)], now=at(33))
    assert await running(store, "a") == 1


async def test_a_freed_place_of_a_tenant_at_its_limit_wakes_the_claim_loops(
    store: JobStore, open_session: Opener, settings: ClusterSettings
) -> None:
    await add(store, "a", 2)
    await store.tenants.set_limit("a", 1)
    n1 = await open_session("n1")
    await n1.try_lock(ALL)
    (job,) = (await n1.claim(ALL, 10, 30.0, now=at(15))).jobs
    heard: list[str] = []
    listener = await psycopg.AsyncConnection.connect(settings.database_url, autocommit=True)
    try:
        await listener.execute(f'LISTEN "{settings.wake_channel}"')
        await n1.completions.complete([completion(job, at(16))], now=at(16))
        gen = listener.notifies(timeout=10.0)
        async for note in gen:
            heard.append(note.payload)
            break
    finally:
        await listener.close()
    assert heard == [notify.TENANT_PLACE_FREED]


async def test_bad_limits_are_refused_and_write_nothing(store: JobStore) -> None:
    for bad in (0, -1, 1_000_001, True, "3"):
        with pytest.raises(InvalidInput, match="max_concurrent"):
            await store.tenants.set_limit("a", bad)  # type: ignore[arg-type]
    with pytest.raises(InvalidInput, match="tenant"):
        await store.tenants.set_limit("", 3)
    with pytest.raises(InvalidInput, match="has no limit"):
        await store.tenants.clear_limit("a")
    assert await store.tenants.limits() == []


async def test_the_audit_finds_slots_held_by_their_tenants_limit_waiting(
    store: JobStore, open_session: Opener
) -> None:
    # A tenant's one place taken by a run that goes on: its other job's due slot waits for
    # it. Past the grace, the audit called that slot missing, as if no node had taken it.
    await add(store, "a", 2)
    await store.tenants.set_limit("a", 1)
    await store.db.conn.execute("UPDATE job_revisions SET at = %(t)s", {"t": T0})
    n1 = await open_session("n1")
    await n1.try_lock(ALL)
    (runs,) = (await n1.claim(ALL, 10, 600.0, now=at(11))).jobs
    scope = Scope(T0, at(15), tenant="a", grace_s=0.0, now=at(15))
    lines = [line async for line in audit_lines(store.db.conn, scope)]
    other = "a-001" if runs.name == "a-000" else "a-000"
    assert sorted((line.job, line.verdict) for line in lines) == sorted(
        [(runs.name, "running"), (other, "waiting")]
    )
