"""The lock session against a real Postgres: shard locks, claims, fencing, leases, recovery.

Every multi-connection fact (lock exclusivity, SKIP LOCKED) is checked with several real
connections, and time is driven with explicit ``now=`` values instead of sleeps.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import re
import time
from collections import Counter
from datetime import UTC
from uuid import UUID

import psycopg
import pytest

from cluster.errors import StoreError
from cluster.jobs.spec import OPTIONS, JobSpec
from cluster.settings import ClusterSettings
from cluster.store import notify
from cluster.store.connect import Conn, connect
from cluster.store.jobstore.store import JobStore
from cluster.store.lock.records import ClaimedJob
from cluster.store.lock.session import LockSession, SessionLost, claim_params
from cluster.store.queries import query, variant
from tests.helpers.databases import ADMIN_URL
from tests.helpers.partition import Partition
from tests.helpers.sessions import ALL, T0, Opener, add_jobs, at, completion, run_rows
from tests.helpers.waiting import until

LOW, HIGH = list(range(8)), list(range(8, 16))


# -- shard locks -----------------------------------------------------------------------


async def test_shard_locks_are_exclusive_across_sessions(
    open_session: Opener, settings: ClusterSettings
) -> None:
    a, b = await open_session("node-a"), await open_session("node-b")
    assert await a.try_lock(list(range(8))) == set(range(8))
    # b gets only what a does not hold, and holding is visible to both sides.
    assert await b.try_lock(list(range(4, 12))) == set(range(8, 12))
    assert await a.my_locks() == set(range(8))
    assert await b.my_locks() == set(range(8, 12))

    # pg_locks names the holder (application_name = node id).
    conn = await connect(settings, "observer")
    try:
        cur = await conn.execute(query("shard_holders"), {"ns": settings.lock_namespace})
        holders = {row["shard"]: row["node_id"] for row in await cur.fetchall()}
    finally:
        await conn.close()
    assert holders == {**dict.fromkeys(range(8), "node-a"), **dict.fromkeys(range(8, 12), "node-b")}

    # An unlocked shard is free for the other session; unlocking what you do not hold
    # releases nothing.
    assert await a.unlock([4, 5]) == {4, 5}
    assert await b.unlock([0]) == set()
    assert await b.try_lock([4, 5, 6]) == {4, 5}
    assert await a.unlock([4]) == set()

    # A session that ends takes its locks with it (once the server has seen it end).
    await a.close()

    async def b_has_them_all() -> bool:
        return await b.try_lock(list(range(8))) == set(range(8))

    await until(b_has_them_all, "b has them all")
    assert await b.my_locks() == set(range(12))

    # Locking a held shard again does not stack the lock: one unlock hands it over.
    assert await b.try_lock([4, 5, 4]) == {4, 5}
    assert await b.unlock([4, 5]) == {4, 5}
    c = await open_session("node-c")
    assert await c.try_lock([4, 5]) == {4, 5}


async def test_sessions_opening_at_the_same_moment_are_all_accepted(
    store: JobStore, settings: ClusterSettings
) -> None:
    """Each session probes that its locks outlive a statement; the probes of nodes that
    start together (compose, ``pulse up``, reconnects) must not collide."""
    for _ in range(5):
        sessions = [
            LockSession(settings, f"n{i}", "z", session_timeout_s=10, statement_timeout_s=5)
            for i in range(6)
        ]
        try:
            assert await asyncio.gather(*(s.open() for s in sessions)) == [16] * 6
            for session in sessions:
                assert await session.my_locks() == set()  # the probe lock is gone
        finally:
            for session in sessions:
                await session.close()


async def test_the_lock_session_never_compiles_its_statements(open_session: Opener) -> None:
    """Over many shards of many jobs the claim's cost estimate crosses jit_above_cost, and
    compiling it would cost far more than running it."""
    session = await open_session("n1")
    conn = session._conn
    assert conn is not None
    cur = await conn.execute("SHOW jit")
    assert await cur.fetchone() == {"jit": "off"}


async def test_sessions_read_times_in_utc_whatever_the_server_time_zone(
    store: JobStore, open_session: Opener
) -> None:
    await add_jobs(store, 1)
    session = await open_session("n1")
    conn = session._conn
    assert conn is not None
    cur = await conn.execute("SELECT current_setting('TimeZone') AS tz, now() AS t")
    row = await cur.fetchone()
    assert row is not None
    assert row["tz"] == "UTC"
    assert row["t"].tzinfo is UTC
    jobs = await store.jobs()
    assert jobs[0].next_run_at is not None
    assert jobs[0].next_run_at.tzinfo is UTC


async def test_locks_of_another_cluster_namespace_do_not_interfere(
    open_session: Opener, settings: ClusterSettings
) -> None:
    a = await open_session("node-a")
    other = ClusterSettings(
        database_url=settings.database_url,
        redis_url=settings.redis_url,
        schema=settings.schema,
        cluster=settings.cluster + "-other",
    )
    assert other.lock_namespace != settings.lock_namespace
    b = LockSession(other, "node-b", "z", session_timeout_s=10, statement_timeout_s=5)
    await b.open()
    try:
        assert await a.try_lock(ALL) == set(ALL)
        assert await b.try_lock(ALL) == set(ALL)
        assert await a.my_locks() == set(ALL) and await b.my_locks() == set(ALL)
    finally:
        await b.close()


# -- claims ----------------------------------------------------------------------------


async def test_claim_never_returns_a_job_from_an_unheld_shard(
    store: JobStore, open_session: Opener
) -> None:
    jobs = await add_jobs(store, 96)
    shard_of = {j.id: j.shard for j in jobs}
    assert set(shard_of.values()) & set(LOW) and set(shard_of.values()) & set(HIGH)
    a = await open_session("node-a")
    assert await a.try_lock(LOW) == set(LOW)

    assert (await a.claim([], 100, 30.0, now=at(60))).jobs == []
    claimed = (await a.claim(LOW, 100, 30.0, now=at(60))).jobs
    assert claimed and {j.shard for j in claimed} <= set(LOW)
    assert {j.id for j in claimed} == {i for i, s in shard_of.items() if s in LOW}
    # The jobs of the other shards are still idle and due: nobody holds their shards.
    by_status = Counter((j.status, j.shard in LOW) for j in await store.jobs())
    assert by_status == {("running", True): len(claimed), ("idle", False): 96 - len(claimed)}


async def test_claim_respects_the_limit_and_takes_the_oldest_slots_first(
    store: JobStore, open_session: Opener
) -> None:
    jobs = await add_jobs(store, 40)
    a = await open_session("node-a")
    await a.try_lock(ALL)
    # Spread the due times: job i is due at T0 + i seconds.
    conn = await connect(a.settings, "setup")
    try:
        for i, job in enumerate(sorted(jobs, key=lambda j: j.name)):
            await conn.execute(
                "UPDATE jobs SET next_run_at = %s, slot_at = %s WHERE id = %s",
                (at(i), at(i), job.id),
            )
    finally:
        await conn.close()
    first = await a.claim(ALL, 5, 30.0, now=at(100))
    assert [j.name for j in first.jobs] == [f"job-{i:04d}" for i in range(5)]
    second = await a.claim(ALL, 7, 30.0, now=at(100))
    assert [j.name for j in second.jobs] == [f"job-{i:04d}" for i in range(5, 12)]
    # Not due yet at t = 20: only slots up to 20 s, and the next due time is reported.
    third = await a.claim(ALL, 100, 30.0, now=at(20))
    assert [j.name for j in third.jobs] == [f"job-{i:04d}" for i in range(12, 21)]
    assert third.next_due == at(21) and third.db_now == at(20)


async def test_a_claim_looking_ahead_takes_what_falls_due_within_the_window(
    store: JobStore, open_session: Opener
) -> None:
    jobs = {j.name: j for j in await add_jobs(store, 3)}
    a = await open_session("node-a")
    await a.try_lock(ALL)
    due = {"job-0000": at(10), "job-0001": at(10.1), "job-0002": at(10.5)}
    conn = await connect(a.settings, "setup")
    try:
        for name, when in due.items():
            await conn.execute(
                "UPDATE jobs SET next_run_at = %s, slot_at = %s WHERE id = %s",
                (when, when, jobs[name].id),
            )
        result = await a.claim(ALL, 100, 30.0, now=at(9.9), ahead_s=0.2)
        assert sorted(j.name for j in result.jobs) == ["job-0000", "job-0001"]
        assert {j.name: j.due for j in result.jobs} == {
            "job-0000": at(10),
            "job-0001": at(10.1),
        }
        assert (result.db_now, result.next_due) == (at(9.9), at(10.5))
        # The attempt starts when it falls due, not when it was claimed.
        cur = await conn.execute("SELECT name, locked_at FROM jobs WHERE status = 'running'")
        assert {r["name"]: r["locked_at"] for r in await cur.fetchall()} == {
            "job-0000": at(10),
            "job-0001": at(10.1),
        }
    finally:
        await conn.close()
    # Without the look-ahead nothing else is due yet.
    assert (await a.claim(ALL, 100, 30.0, now=at(10.2))).jobs == []


async def test_the_claim_returns_the_claimed_job_fields_in_order(
    store: JobStore, open_session: Opener
) -> None:
    await add_jobs(store, 1)
    a = await open_session("node-a")
    await a.try_lock(ALL)
    conn = await connect(a.settings, "observer")
    try:
        params = claim_params(ALL, 10, 30.0, "node-x", "z", at(60))
        async with conn.transaction(force_rollback=True):
            cur = await conn.execute(variant("claim", "fair", False), params)
            assert cur.description is not None
            names = [c.name for c in cur.description]
    finally:
        await conn.close()
    renamed = {"shard_id": "shard", "slot_at": "slot", "next_run_at": "due"}
    renamed |= {str(d.column): d.name for d in OPTIONS if d.column}  # tenant_id, max_retries
    assert names[:3] == ["db_now", "next_due", "held"]
    assert [renamed.get(n, n) for n in names[3:]] == list(ClaimedJob._fields)


async def test_the_claim_returns_an_empty_payload_as_none_and_others_parsed(
    store: JobStore, open_session: Opener
) -> None:
    specs = [
        JobSpec.build("bare", "@every 10s", "cluster.chaos.witness:record"),
        JobSpec.build("rich", "@every 10s", "cluster.chaos.witness:record", payload={"n": [1, 2]}),
    ]
    await store.definitions.apply(specs, now=T0)
    a = await open_session("node-a")
    await a.try_lock(ALL)
    claimed = await a.claim(ALL, 10, 30.0, now=at(60))
    assert {j.name: j.payload for j in claimed.jobs} == {"bare": None, "rich": {"n": [1, 2]}}


async def test_two_sessions_on_different_shards_never_claim_the_same_job(
    store: JobStore, open_session: Opener
) -> None:
    jobs = await add_jobs(store, 200)
    a, b = await open_session("node-a"), await open_session("node-b")
    assert await a.try_lock(LOW) == set(LOW) and await b.try_lock(HIGH) == set(HIGH)
    seen: Counter[UUID] = Counter()
    for _ in range(100):
        results = await asyncio.gather(
            a.claim(LOW, 7, 30.0, now=at(60)), b.claim(HIGH, 7, 30.0, now=at(60))
        )
        if not any(r.jobs for r in results):
            break
        for result, mine in zip(results, (LOW, HIGH), strict=True):
            assert {j.shard for j in result.jobs} <= set(mine)
            seen.update(j.id for j in result.jobs)
    assert seen.most_common(1)[0][1] == 1
    assert set(seen) == {j.id for j in jobs}


async def _claim_in_transaction(conn: Conn, shards: list[int], limit: int) -> list[UUID]:
    node_id = str(conn.info.parameter_status("application_name"))
    params = claim_params(shards, limit, 30.0, node_id, "z", at(60))
    cur = await conn.execute(variant("claim", "fair", False), params)
    return [row["id"] for row in await cur.fetchall() if row["id"] is not None]


async def test_claims_over_the_same_shards_skip_each_others_rows(
    store: JobStore, settings: ClusterSettings
) -> None:
    """SKIP LOCKED itself: claim statements over one shard list in overlapping transactions
    (which the shard locks normally prevent) neither wait for nor share a row."""
    jobs = await add_jobs(store, 60)
    conns = [
        await connect(settings, f"raw-{i}", statement_timeout_s=3.0, autocommit=False)
        for i in range(3)
    ]
    try:
        first = await _claim_in_transaction(conns[0], ALL, 20)  # held, uncommitted
        started = time.monotonic()
        second = await _claim_in_transaction(conns[1], ALL, 60)  # skips first's rows
        third = await _claim_in_transaction(conns[2], ALL, 60)  # everything is taken
        assert time.monotonic() - started < 2.0  # skipped, never waited for
        for conn in conns:
            await conn.commit()
    finally:
        for conn in conns:
            await conn.close()
    assert (len(first), len(second), len(third)) == (20, 40, 0)
    assert set(first) | set(second) == {j.id for j in jobs}
    # One attempt in flight per (job, slot), each owned by the statement that claimed it.
    runs = await store.runs(limit=1000)
    assert len({(r.job_id, r.scheduled_for) for r in runs}) == len(runs) == 60
    assert Counter(r.node_id for r in runs) == {"raw-0": 20, "raw-1": 40}


async def test_many_concurrent_claims_over_the_same_shards_never_share_a_job(
    store: JobStore, settings: ClusterSettings
) -> None:
    jobs = await add_jobs(store, 300)
    conns = [await connect(settings, f"raw-{i}") for i in range(4)]
    seen: Counter[UUID] = Counter()
    try:
        for _ in range(50):
            batches = await asyncio.gather(*(_claim_in_transaction(c, ALL, 9) for c in conns))
            if not any(batches):
                break
            for batch in batches:
                seen.update(batch)
    finally:
        for conn in conns:
            await conn.close()
    assert seen.most_common(1)[0][1] == 1
    assert set(seen) == {j.id for j in jobs}


# -- fencing, leases, release ----------------------------------------------------------


async def test_a_stale_completion_changes_nothing_and_returns_no_id(
    store: JobStore, open_session: Opener
) -> None:
    await add_jobs(store, 1)
    a, b = await open_session("node-a"), await open_session("node-b")
    (stale,) = (await a.claim(ALL, 10, 30.0, now=at(10))).jobs
    # a's lease expires; b recovers the slot and claims it again under a newer token.
    assert [r["reason"] for r in await b.recover(ALL, ["node-a", "node-b"], now=at(41))] == [
        "lease expired"
    ]
    (fresh,) = (await b.claim(ALL, 10, 30.0, now=at(41))).jobs
    assert fresh.slot == stale.slot and fresh.lease_token > stale.lease_token
    before = await store.get("job-0000")
    runs_before = await run_rows(store, "job-0000")

    # a finishes late: fenced, whatever it says about the next slot.
    late = completion(stale, at(45))
    assert await a.completions.complete([late], now=at(45)) == set()
    assert await store.get("job-0000") == before
    assert await run_rows(store, "job-0000") == runs_before == [(at(10), "running", "node-b", 2)]

    # Fenced in a batch too: the live completion in the same statement still applies.
    assert await b.completions.complete([late, completion(fresh, at(46))], now=at(46)) == {fresh.id}
    after = await store.get("job-0000")
    # Catch-up "once": slots 20, 30 and 40 s are all due at 46 s; only 40 s runs.
    assert (after.status, after.next_run_at, after.locked_by) == ("idle", at(40), None)
    assert await run_rows(store, "job-0000") == [(at(10), "succeeded", "node-b", 2)]


async def test_renewal_extends_the_lease_and_refuses_stale_tokens(
    store: JobStore, open_session: Opener
) -> None:
    await add_jobs(store, 2)
    a = await open_session("node-a")
    first, second = (await a.claim(ALL, 10, 30.0, now=at(10))).jobs
    assert (await store.get(first.name)).lease_expires_at == at(40)

    assert await a.renew([(first.id, first.lease_token)], 30.0, now=at(25)) == {first.id: None}
    assert (await store.get(first.name)).lease_expires_at == at(55)
    # A token from before the claim, or another job's token, renews nothing.
    assert await a.renew([(first.id, first.lease_token - 1)], 30.0, now=at(26)) == {}
    assert await a.renew([(second.id, first.lease_token - 1)], 30.0, now=at(26)) == {}
    assert (await store.get(first.name)).lease_expires_at == at(55)
    assert (await store.get(second.name)).lease_expires_at == at(40)

    # One statement renews every lease; a finished run's lease is gone for good.
    assert await a.completions.complete([completion(second, at(27))], now=at(27)) == {second.id}
    kept = await a.renew(
        [(first.id, first.lease_token), (second.id, second.lease_token)], 60.0, now=at(28)
    )
    assert kept == {first.id: None}
    assert (await store.get(first.name)).lease_expires_at == at(88)
    assert (await store.get(second.name)).lease_expires_at is None
    # A renewed lease is not recovered at a time the original lease would have expired.
    assert await a.recover(ALL, ["node-a"], now=at(60)) == []


async def test_release_hands_the_slot_back_for_another_attempt(
    store: JobStore, open_session: Opener
) -> None:
    await add_jobs(store, 2)
    a, b = await open_session("node-a"), await open_session("node-b")
    first, second = (await a.claim(ALL, 10, 30.0, now=at(10))).jobs
    released = await a.release([(first.id, first.lease_token)], "draining", now=at(12))
    assert released == {first.id}
    job = await store.get(first.name)
    assert (job.status, job.next_run_at, job.slot_at, job.attempt, job.locked_by) == (
        "idle",
        at(12),
        at(10),
        2,
        None,
    )
    assert job.lease_token == first.lease_token + 1
    (run,) = await store.runs(job=first.name)
    assert (run.status, run.last_error) == ("lost", "draining")
    # Releasing again with the old token is fenced; so is a completion.
    assert await a.release([(first.id, first.lease_token)], "again", now=at(13)) == set()
    assert await a.completions.complete([completion(first, at(13))], now=at(13)) == set()

    # Another node runs the same slot as attempt 2; the other job is untouched.
    (again,) = (await b.claim(ALL, 10, 30.0, now=at(13))).jobs
    assert (again.id, again.slot, again.attempt) == (first.id, at(10), 2)
    assert (await store.get(second.name)).status == "running"


# -- recovery --------------------------------------------------------------------------


async def test_recovery_takes_back_only_runs_of_dead_owners_or_expired_leases(
    store: JobStore, open_session: Opener
) -> None:
    await add_jobs(store, 64)
    dead, alive, heir = (
        await open_session("dead"),
        await open_session("alive"),
        await open_session("heir"),
    )
    dead_jobs = (await dead.claim(LOW, 100, 300.0, now=at(10))).jobs
    alive_jobs = (await alive.claim(HIGH, 100, 30.0, now=at(10))).jobs
    assert dead_jobs and alive_jobs
    await dead.close()  # the process died: no session left; its lease runs for 300 s

    async def session_gone() -> bool:
        return not await heir.peers.live_sessions(["dead"])

    await until(session_gone, "session gone")

    # Redis still lists "dead" (heartbeat not yet expired): nobody takes its runs yet.
    assert await heir.recover(ALL, ["dead", "alive", "heir"], now=at(11)) == []
    # "alive" lost its heartbeat but its session lives: not dead either.
    assert await heir.recover(HIGH, ["heir"], now=at(11)) == []
    # Only the given shards are touched.
    assert await heir.recover(HIGH, ["alive", "heir"], now=at(11)) == []
    # Neither live nor connected: recovered at once, long before its lease would end.
    taken = await heir.recover(ALL, ["alive", "heir"], now=at(12))
    assert {r["id"] for r in taken} == {j.id for j in dead_jobs}
    assert {(r["reason"], r["locked_by"], r["attempt"]) for r in taken} == {
        ("owner gone", "dead", 2)
    }
    # A live owner loses its runs only when its lease expires (10 + 30 s).
    assert await heir.recover(ALL, ["alive", "heir"], now=at(40)) == []
    expired = await heir.recover(ALL, ["alive", "heir"], now=at(40.001))
    assert {r["id"] for r in expired} == {j.id for j in alive_jobs}
    assert {r["reason"] for r in expired} == {"lease expired"}

    runs = await store.runs(limit=1000)
    assert Counter(r.status for r in runs) == {"lost": 64}
    assert {r.last_error for r in runs} == {
        "owner gone (node dead)",
        "lease expired (node alive)",
    }
    for job in await store.jobs():
        assert (job.status, job.attempt, job.slot_at) == ("idle", 2, at(10))
    # The heir claims every slot again as attempt 2.
    again = (await heir.claim(ALL, 100, 30.0, now=at(41))).jobs
    assert len(again) == 64 and {(j.slot, j.attempt) for j in again} == {(at(10), 2)}


async def test_runs_claimed_ahead_of_their_due_time_are_recovered_too(
    store: JobStore, open_session: Opener
) -> None:
    await add_jobs(store, 8)  # due at T0 + 10 s
    dead, heir = await open_session("dead"), await open_session("heir")
    early = (await dead.claim(ALL, 100, 300.0, now=at(9.95), ahead_s=0.1)).jobs
    assert len(early) == 8
    await dead.close()

    async def session_gone() -> bool:
        return not await heir.peers.live_sessions(["dead"])

    await until(session_gone, "session gone")
    taken = await heir.recover(ALL, ["heir"], now=at(9.96))  # before they fall due
    assert {r["id"] for r in taken} == {j.id for j in early}


async def test_a_restarted_node_takes_back_what_its_previous_process_left_running(
    store: JobStore, open_session: Opener
) -> None:
    """Under a fixed node id the new process looks exactly like the dead one to everyone's
    recovery (same id, a live session); at start-up it takes those runs back itself."""
    await add_jobs(store, 32)
    before = await open_session("n1")
    other = await open_session("n2")
    mine = (await before.claim(LOW, 100, 300.0, now=at(10))).jobs
    theirs = (await other.claim(HIGH, 100, 300.0, now=at(10))).jobs
    await before.close()  # killed; restarted at once under the same id
    after = await open_session("n1")
    assert await other.recover(ALL, ["n1", "n2"], now=at(12)) == []  # looks alive
    taken = await after.recover_own(now=at(12))
    assert {r["id"] for r in taken} == {j.id for j in mine}
    assert {(r["reason"], r["attempt"]) for r in taken} == {("previous process gone", 2)}
    # Only its own runs: n2's are untouched and its completions still apply.
    assert await other.completions.complete(
        [completion(j, at(13)) for j in theirs], now=at(13)
    ) == {j.id for j in theirs}
    runs = {r.job_id: (r.status, r.last_error) for r in await store.runs(limit=100)}
    assert {runs[j.id] for j in mine} == {("lost", "previous process gone (node n1)")}
    again = (await after.claim(ALL, 100, 30.0, now=at(14))).jobs
    assert {(j.id, j.slot, j.attempt) for j in again} == {(j.id, at(10), 2) for j in mine}


async def test_a_namesake_in_another_database_does_not_keep_a_dead_node_alive(
    store: JobStore, open_session: Opener
) -> None:
    await add_jobs(store, 8)
    doomed = await open_session("doomed")
    claimed = (await doomed.claim(ALL, 100, 300.0, now=at(10))).jobs
    await doomed.close()
    # Another cluster's node of the same name, connected to another database.
    namesake = await psycopg.AsyncConnection.connect(ADMIN_URL, application_name="doomed")
    try:
        heir = await open_session("heir")

        async def only_the_namesake_left() -> bool:
            return not await heir.peers.live_sessions(["doomed"])

        await until(only_the_namesake_left, "only the namesake left")
        taken = await heir.recover(ALL, ["heir"], now=at(11))
        assert {r["id"] for r in taken} == {j.id for j in claimed}
    finally:
        await namesake.close()


# -- LISTEN/NOTIFY ---------------------------------------------------------------------


async def test_job_writes_wake_listeners_with_the_shard(
    store: JobStore, settings: ClusterSettings
) -> None:
    payloads: asyncio.Queue[str] = asyncio.Queue()
    stop = asyncio.Event()
    task = asyncio.create_task(notify.listen(settings, "n1", payloads.put_nowait, stop))
    observer = await connect(settings, "observer")

    async def listening() -> bool:
        cur = await observer.execute(
            "SELECT 1 FROM pg_stat_activity WHERE application_name = 'n1/listen' "
            "AND query LIKE 'LISTEN%%' AND datname = current_database()"
        )
        return await cur.fetchone() is not None

    async def next_payload() -> str:
        return await asyncio.wait_for(payloads.get(), 10.0)

    try:
        await until(listening, "listening")
        job = await store.definitions.add(
            JobSpec.build("woken", "@every 1h", "cluster.chaos.witness:record")
        )
        assert await next_payload() == str(job.shard)
        await store.trigger("woken")
        assert await next_payload() == str(job.shard)
        await store.pause("woken")
        assert await next_payload() == str(job.shard)
        assert payloads.empty()
    finally:
        stop.set()
        await observer.close()
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.wait_for(task, 5.0)


async def test_a_listener_whose_connection_is_killed_fails_at_once(
    settings: ClusterSettings,
) -> None:
    stop = asyncio.Event()
    task = asyncio.create_task(notify.listen(settings, "n1", lambda _: None, stop))
    observer = await connect(settings, "observer")
    kill = (
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
        "WHERE application_name = 'n1/listen' AND query LIKE 'LISTEN%%' "
        "AND datname = current_database()"
    )

    async def killed() -> bool:
        cur = await observer.execute(kill)
        return await cur.fetchone() is not None

    try:
        await until(killed, "killed")
        # Well within the claim loop's poll interval: the node reconnects with backoff.
        with pytest.raises(StoreError, match="wake-up listener"):
            await asyncio.wait_for(task, 5.0)
    finally:
        stop.set()
        task.cancel()
        await observer.close()


# -- the driver: prepared statements, refused and cancelled statements, the deadline ------


def _as_prepared(text: bytes) -> str:
    """``text`` as psycopg prepares it: ``%(x)s`` numbered ``$1..$n`` in order of first use."""
    order: list[str] = []

    def number(match: re.Match[str]) -> str:
        if match[1] not in order:
            order.append(match[1])
        return f"${order.index(match[1]) + 1}"

    return re.sub(r"%\((\w+)\)s", number, text.decode())


async def _plans(session: LockSession, text: bytes) -> list[tuple[int, int]]:
    """(generic, custom) plans of each prepared statement of ``text`` on the session."""
    conn = session._conn
    assert conn is not None
    cur = await conn.execute(
        "SELECT generic_plans, custom_plans FROM pg_prepared_statements"
        " WHERE statement = %(text)s ORDER BY prepare_time",
        {"text": _as_prepared(text)},
    )
    return [(row["generic_plans"], row["custom_plans"]) for row in await cur.fetchall()]


async def _executions(session: LockSession, name: str) -> list[int]:
    """Executions of each prepared statement of ``name`` on the session's own backend."""
    return [sum(plans) for plans in await _plans(session, query(name))]


async def test_the_lock_session_runs_its_statements_prepared_on_the_server(
    store: JobStore, open_session: Opener
) -> None:
    await add_jobs(store, 4)  # due at 10 s
    a = await open_session("node-a")
    await a.try_lock(ALL)
    for _ in range(5):
        assert (await a.claim(ALL, 10, 30.0, now=at(1))).jobs == []
        await a.ping()
    claimed = (await a.claim(ALL, 10, 30.0, now=at(10))).jobs
    assert await a.completions.complete([completion(j, at(11)) for j in claimed], now=at(11)) == {
        j.id for j in claimed
    }
    # Prepared once each, at first use; every later call runs the same statement. The
    # claim (its plain variant) settles on a generic plan: planned once, not at every call.
    (plain,) = await _plans(a, variant("claim", "fair", False))
    assert sum(plain) == 6 and plain[0] >= 1, plain
    assert await _executions(a, "ping") == [5]
    assert await _executions(a, "complete") == [1]


async def test_statements_refused_by_the_server_leave_the_session_working(
    store: JobStore, open_session: Opener
) -> None:
    """A refused statement costs at most one re-prepare: no ROLLBACK is ever sent on the
    session (autocommit), so psycopg keeps every statement it prepared."""
    await add_jobs(store, 2)
    a = await open_session("node-a")
    await a.try_lock(ALL)
    # Refused at its first execution: a negative limit.
    with pytest.raises(StoreError, match="LIMIT") as refused:
        await a.claim(ALL, -1, 30.0, now=at(10))
    assert not isinstance(refused.value, SessionLost)
    first, second = (await a.claim(ALL, 10, 30.0, now=at(10))).jobs
    assert await a.completions.complete([completion(first, at(11))], now=at(11)) == {first.id}

    # Refused once prepared: runs.status has no such outcome, and the whole completion,
    # the job row's update included, is undone.
    bad = completion(second, at(11))._replace(outcome="exploded")
    with pytest.raises(StoreError, match="check constraint") as refused:
        await a.completions.complete([bad], now=at(11))
    assert not isinstance(refused.value, SessionLost)
    assert (await store.get(second.name)).status == "running"
    assert await a.completions.complete([completion(second, at(12))], now=at(12)) == {second.id}

    assert a.connected and await a.my_locks() == set(ALL)
    assert (await a.claim(ALL, 10, 30.0, now=at(13))).jobs == []
    assert await _executions(a, "complete") == [3]  # the refused one ran on it too
    plain = await _plans(a, variant("claim", "fair", False))
    assert max(sum(p) for p in plain) == 2  # the two after the refused one
    assert {r.status for r in await store.runs()} == {"succeeded"}


async def test_a_statement_cancelled_by_its_caller_leaves_the_session_working(
    store: JobStore, settings: ClusterSettings, open_session: Opener
) -> None:
    await add_jobs(store, 1)
    a = await open_session("node-a")
    await a.try_lock(ALL)
    (job,) = (await a.claim(ALL, 10, 30.0, now=at(10))).jobs
    await a.renew([(job.id, job.lease_token)], 30.0, now=at(11))  # prepared
    blocker = await connect(settings, "blocker", autocommit=False)
    try:
        await blocker.execute("SELECT 1 FROM jobs WHERE id = %s FOR UPDATE", (job.id,))
        renewal = asyncio.create_task(a.renew([(job.id, job.lease_token)], 30.0, now=at(12)))

        async def waiting_for_the_row() -> bool:
            cur = await blocker.execute(
                "SELECT 1 FROM pg_stat_activity WHERE application_name = 'node-a'"
                " AND wait_event_type = 'Lock' AND datname = current_database()"
            )
            return await cur.fetchone() is not None

        await until(waiting_for_the_row, "waiting for the row")
        renewal.cancel()
        with pytest.raises(asyncio.CancelledError):
            await renewal
    finally:
        await blocker.rollback()
        await blocker.close()
    # psycopg cancelled the statement on the server; the session, its locks and its
    # prepared statement are still there.
    assert a.connected
    assert await a.renew([(job.id, job.lease_token)], 30.0, now=at(13)) == {job.id: None}
    assert await a.my_locks() == set(ALL)
    assert await _executions(a, "renew") == [3]


async def test_a_session_that_hears_nothing_is_lost_at_its_deadline(
    store: JobStore, settings: ClusterSettings
) -> None:
    """Past the deadline the connection is closed at once: psycopg, cancelled, would first
    send a cancel request and wait for the statement, seconds more with nothing answering."""
    partition = Partition(settings.database_url)
    lost: list[float] = []
    async with partition as url:
        relayed = dataclasses.replace(settings, database_url=url)
        session = LockSession(
            relayed, "n1", "z", session_timeout_s=10, statement_timeout_s=1,
            on_lost=lambda: lost.append(time.monotonic()),
        )  # fmt: skip
        await session.open()
        try:
            assert await session.try_lock(ALL) == set(ALL)
            partition.cut = True
            started = time.monotonic()
            with pytest.raises(SessionLost, match="no answer within"):
                await session.ping()
            assert time.monotonic() - started < 2.5  # the deadline: 1 s + 1 s
            assert len(lost) == 1 and not session.connected
        finally:
            await session.close()
