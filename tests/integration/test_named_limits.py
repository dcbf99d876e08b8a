"""Named limits shared across jobs (0.3.0_pre_uses_named_limits, docs/design/limits.md): a
run takes every key its job uses or none, across every session and without waiting for
another claim; every way a run ends gives its keys back; flights take keys too; a rate key
never lets more starts into one period than its rate; a key in use cannot be removed, and
bad input writes nothing."""

from __future__ import annotations

import asyncio
from typing import Any

import psycopg
import pytest

from cluster.errors import Conflict, InvalidInput, NotFound
from cluster.jobs.spec import JobSpec
from cluster.settings import ClusterSettings
from cluster.store import notify
from cluster.store.connect import connect
from cluster.store.jobstore.store import JobStore
from cluster.store.lock.records import ClaimedJob
from cluster.store.observe.audit import Scope, audit_lines
from cluster.store.queries import query
from tests.helpers.flights import ended, handed
from tests.helpers.sessions import ALL, T0, Opener, at, completion

HANDLER = "cluster.chaos.witness:record"


async def add(store: JobStore, prefix: str, count: int, **options: Any) -> None:
    """``count`` jobs named ``prefix-NNN``, due at 10 s."""
    specs = [
        JobSpec.build(f"{prefix}-{i:03d}", "@every 10s", HANDLER, **options) for i in range(count)
    ]
    await store.definitions.apply(specs, now=T0)


async def holding(store: JobStore, key: str, tenant: str | None = None) -> int:
    """The runs holding ``key`` by the count the key keeps, checked against the rows."""
    found = await store.limits.get(key, tenant)
    assert found.running == len(found.holders)  # the count kept is exact
    return found.running


def names(jobs: list[ClaimedJob]) -> list[str]:
    return sorted(j.name for j in jobs)


async def test_a_run_takes_every_key_it_uses_or_none(store: JobStore, open_session: Opener) -> None:
    await store.limits.set("warehouse", max_concurrent=2)
    await store.limits.set("partner", max_concurrent=1)
    await add(store, "both", 3, uses="warehouse,partner")
    await add(store, "wh", 3, uses=["warehouse"])
    n1 = await open_session("n1")
    await n1.try_lock(ALL)
    first = await n1.claim(ALL, 20, 30.0, now=at(15))
    # Whichever took warehouse first, no run holds one key of two: a `both` that would
    # take warehouse without partner (or the reverse) was refused and left due.
    taken = names(first.jobs)
    assert len(taken) == 2 and sum(n.startswith("both") for n in taken) <= 1
    assert await holding(store, "warehouse") == 2
    assert await holding(store, "partner") == sum(n.startswith("both") for n in taken)
    partial = await store.db.conn.execute(
        "SELECT count(*) AS n FROM jobs WHERE cardinality(coalesce(holds, '{}'))"
        " NOT IN (0, cardinality(uses))"
    )
    assert (await partial.fetchone()) == {"n": 0}
    # The waiting slots are recorded, each with the key it waits for.
    waiting = {w["job"]: w for k in await store.limits.keys() for w in k.waiters}
    every = {f"{p}-{i:03d}" for p in ("both", "wh") for i in range(3)}
    assert set(waiting) == every - set(taken)
    # A run's end gives back every key it holds; the next claim takes them again.
    await n1.completions.complete([completion(j, at(16)) for j in first.jobs], now=at(16))
    assert await holding(store, "warehouse") == 0 and await holding(store, "partner") == 0
    again = await n1.claim(ALL, 20, 30.0, now=at(17))
    assert len(again.jobs) == 2 and await holding(store, "warehouse") == 2


async def test_claims_at_once_with_crossing_keys_never_deadlock_nor_exceed(
    store: JobStore, open_session: Opener
) -> None:
    await store.limits.set("a", max_concurrent=3)
    await store.limits.set("b", max_concurrent=2)
    # uses is a set: whatever order it is written in, keys are locked in one order, and
    # never waited for (SKIP LOCKED).
    await add(store, "ab", 20, uses=["a", "b"])
    await add(store, "ba", 20, uses=["b", "a"])
    await add(store, "a", 20, uses=["a"])
    sessions = [await open_session(f"n{i}") for i in range(4)]
    for i, s in enumerate(sessions):
        await s.try_lock(ALL[i::4])
    held: list[tuple[Any, ClaimedJob]] = []
    for round_ in range(10):
        now = at(15 + round_)
        results = await asyncio.gather(
            *(s.claim(ALL[i::4], 10, 30.0, now=now) for i, s in enumerate(sessions))
        )
        for s, result in zip(sessions, results, strict=True):
            held.extend((s, j) for j in result.jobs)
        assert await holding(store, "a") <= 3 and await holding(store, "b") <= 2
        for s, job in held[:1]:
            await s.completions.complete([completion(job, now)], now=now)
        held = held[1:]
    assert await holding(store, "a") == len(held)


async def test_a_claim_never_waits_for_a_key_another_transaction_holds(
    store: JobStore, open_session: Opener, settings: ClusterSettings
) -> None:
    await store.limits.set("a", max_concurrent=5)
    await store.limits.set("b", max_concurrent=5)
    await add(store, "ab", 2, uses="a,b")
    n1 = await open_session("n1")
    await n1.try_lock(ALL)
    other = await connect(settings, "other-claim")
    try:
        async with other.transaction():
            # Another claim holds b's row this instant.
            await other.execute("SELECT 1 FROM limit_keys WHERE name = 'b' FOR NO KEY UPDATE")
            result = await asyncio.wait_for(n1.claim(ALL, 10, 30.0, now=at(15)), timeout=10)
            assert result.jobs == [] and result.held  # refused, not waiting
            assert await holding(store, "a") == 0  # and took nothing of a
    finally:
        await other.close()
    assert len((await n1.claim(ALL, 10, 30.0, now=at(16))).jobs) == 2


async def test_every_way_a_run_ends_gives_its_keys_back(
    store: JobStore, open_session: Opener
) -> None:
    await store.limits.set("k", max_concurrent=4, tenant="t")
    await add(store, "j", 4, uses="k", tenant="t", retries=3)
    n1 = await open_session("n1")
    await n1.try_lock(ALL)
    one, two, three, four = (await n1.claim(ALL, 10, 30.0, now=at(15))).jobs
    assert await holding(store, "k", "t") == 4
    await n1.completions.complete([completion(one, at(16))], now=at(16))  # ends
    await n1.release([(two.id, two.lease_token)], "node stopping", now=at(16))  # given back
    await store.remove(three.name, "t")  # removed while it runs
    assert await holding(store, "k", "t") == 1
    # The node dies: the fenced recovery takes its slot back, and the key with it.
    other = await open_session("n2")
    assert [r["id"] for r in await other.recover(ALL, ["n2"], now=at(60))] == [four.id]
    assert await holding(store, "k", "t") == 0


async def test_flights_take_keys_from_their_claim_to_their_end(
    store: JobStore, open_session: Opener
) -> None:
    await store.limits.set("k", max_concurrent=2)
    await store.definitions.apply(
        [JobSpec.build("fan", "@every 10s", HANDLER, overlap="allow", max_concurrent=5,
                       retries=3, uses="k")],
        now=T0,
    )  # fmt: skip
    n1 = await open_session("n1")
    await n1.try_lock(ALL)
    handed_flights = []
    for t in (10, 20):
        (job,) = (await n1.claim(ALL, 10, 30.0, now=at(t))).jobs
        assert (await n1.completions.spawn([handed(job, at(t + 10))], [], 30.0, now=at(t)))[job.id]
        assert await holding(store, "k") == t // 10
        handed_flights.append(job)
    # At the key's cap the slot is passed over: not `held`, as claiming again would change
    # nothing; the flight that gives its place back wakes the claim loops.
    third = await n1.claim(ALL, 10, 30.0, now=at(30))
    assert third.jobs == [] and not third.held
    first = handed_flights[0]
    await n1.completions.complete_flights([ended(first, "failed", at(31))], now=at(31))
    assert await holding(store, "k") == 1
    (retry,) = await n1.flights.claim(ALL, 10, 30.0, now=at(32))
    assert retry.slot == first.slot and await holding(store, "k") == 2
    # At the key's cap, a queued flight is passed over (not refused and retried), and shows
    # as waiting for its key.
    second = handed_flights[1]
    await n1.completions.complete_flights([ended(second, "failed", at(33))], now=at(33))
    (third,) = (await n1.claim(ALL, 10, 30.0, now=at(34))).jobs  # the regular slot, as 2nd
    assert await n1.completions.spawn([handed(third, at(44))], [], 30.0, now=at(34))
    assert await holding(store, "k") == 2
    assert await n1.flights.claim(ALL, 10, 30.0, now=at(40)) == []
    shown = await store.details("fan", "default")
    assert shown["key_wait"] is not None and shown["key_wait"]["key"] == "k"
    await n1.completions.complete_flights([ended(retry)], now=at(41))
    (again,) = await n1.flights.claim(ALL, 10, 30.0, now=at(42))
    assert again.slot == second.slot and await holding(store, "k") == 2
    assert (await store.details("fan", "default"))["key_wait"] is None


async def test_a_rate_key_lets_no_more_starts_into_a_period_than_its_rate(
    store: JobStore, open_session: Opener
) -> None:
    await store.limits.set("api", rate="2/min")
    await add(store, "call", 6, uses="api")
    n1 = await open_session("n1")
    await n1.try_lock(ALL)
    starts: list[float] = []
    for t in range(15, 200, 5):
        result = await n1.claim(ALL, 10, 30.0, now=at(t))
        for job in result.jobs:
            starts.append(t)
            await n1.completions.complete([completion(job, at(t))], now=at(t))
    assert len(starts) >= 6
    for s in starts:  # every window of a minute
        assert sum(s <= x < s + 60 for x in starts) <= 2, starts


async def test_a_freed_key_at_its_cap_wakes_the_claim_loops(
    store: JobStore, open_session: Opener, settings: ClusterSettings
) -> None:
    await store.limits.set("k", max_concurrent=1)
    await add(store, "j", 2, uses="k")
    n1 = await open_session("n1")
    await n1.try_lock(ALL)
    (job,) = (await n1.claim(ALL, 10, 30.0, now=at(15))).jobs
    heard: list[str] = []
    listener = await psycopg.AsyncConnection.connect(settings.database_url, autocommit=True)
    try:
        await listener.execute(f'LISTEN "{settings.wake_channel}"')
        await n1.completions.complete([completion(job, at(16))], now=at(16))
        async for note in listener.notifies(timeout=10.0):
            heard.append(note.payload)
            break
    finally:
        await listener.close()
    assert heard == [notify.LIMIT_PLACE_FREED]


async def test_a_key_in_use_is_not_removed(store: JobStore) -> None:
    await store.limits.set("k", max_concurrent=1)
    await add(store, "j", 1, uses="k")
    with pytest.raises(Conflict, match="used by 1 job"):
        await store.limits.remove("k")
    assert [k.name for k in await store.limits.keys()] == ["k"]
    await store.remove("j-000", "default")
    await store.limits.remove("k")
    assert await store.limits.keys() == []
    with pytest.raises(NotFound):
        await store.limits.remove("k")


async def test_bad_keys_and_uses_are_refused_and_write_nothing(store: JobStore) -> None:
    for bad in ("0/min", "10", "5/day", "-1/s", "x/min", "10001/s"):
        with pytest.raises(InvalidInput, match="rate"):
            await store.limits.set("k", rate=bad)
    for bad_max in (0, -1, 1_000_001):
        with pytest.raises(InvalidInput, match="max_concurrent"):
            await store.limits.set("k", max_concurrent=bad_max)
    with pytest.raises(InvalidInput, match="give --max-concurrent"):
        await store.limits.set("k")
    assert await store.limits.keys() == []
    # A job naming a key that does not exist, or another tenant's key.
    await store.limits.set("theirs", max_concurrent=1, tenant="b")
    for uses in ("nope", "theirs"):
        with pytest.raises(InvalidInput, match="uses: no limit key"):
            await add(store, "j", 1, uses=uses, tenant="a")
    assert await store.jobs() == []


async def test_a_tenant_key_comes_before_a_cluster_key_of_its_name(
    store: JobStore, open_session: Opener
) -> None:
    await store.limits.set("db", max_concurrent=1)
    await store.limits.set("db", max_concurrent=3, tenant="a")
    await add(store, "a", 4, uses="db", tenant="a")
    await add(store, "b", 4, uses="db", tenant="b")
    n1 = await open_session("n1")
    await n1.try_lock(ALL)
    taken = (await n1.claim(ALL, 20, 30.0, now=at(15))).jobs
    assert sum(j.tenant == "a" for j in taken) == 3 and sum(j.tenant == "b" for j in taken) == 1
    assert await holding(store, "db", "a") == 3 and await holding(store, "db") == 1


async def test_the_audit_reports_a_slot_that_waited_for_a_key(
    store: JobStore, open_session: Opener
) -> None:
    await store.limits.set("k", max_concurrent=1)
    await add(store, "j", 2, uses="k")
    # Revisions are stamped by the database's clock; these jobs were made at T0.
    await store.db.conn.execute("UPDATE job_revisions SET at = %s", (T0,))
    n1 = await open_session("n1")
    await n1.try_lock(ALL)
    (first,) = (await n1.claim(ALL, 10, 30.0, now=at(10))).jobs
    (waiting,) = [j for j in await store.jobs() if j.name != first.name]
    # The other job's slot waits, and says so until it runs.
    shown = await store.details(waiting.name, "default")
    assert shown["key_wait"]["key"] == "k"
    scope = Scope(T0, at(11), grace_s=0.0, now=at(11))
    lines = {line.job: line async for line in audit_lines(store.db.conn, scope)}
    assert lines[waiting.name].verdict == "waiting"
    await n1.completions.complete([completion(first, at(12))], now=at(12))
    (second,) = (await n1.claim(ALL, 10, 30.0, now=at(13))).jobs
    await n1.completions.complete([completion(second, at(14))], now=at(14))
    assert (await store.details(waiting.name, "default"))["key_wait"] is None
    scope = Scope(T0, at(11), grace_s=0.0, now=at(15))
    lines = {line.job: line async for line in audit_lines(store.db.conn, scope)}
    assert lines[first.name].detail == ""
    assert lines[waiting.name].verdict == "ran"
    assert lines[waiting.name].detail == "waited 3s for key k"


async def test_waits_are_pruned_with_the_runs_they_explain(
    store: JobStore, open_session: Opener
) -> None:
    await store.limits.set("k", max_concurrent=1)
    await add(store, "j", 2, uses="k")
    n1 = await open_session("n1")
    await n1.try_lock(ALL)
    (first,) = (await n1.claim(ALL, 10, 30.0, now=at(10))).jobs
    await n1.completions.complete([completion(first, at(11))], now=at(11))
    (second,) = (await n1.claim(ALL, 10, 30.0, now=at(12))).jobs
    await n1.completions.complete([completion(second, at(13))], now=at(13))
    side = store.db.conn
    found = "SELECT count(*) AS n FROM limit_waits"
    assert (await (await side.execute(found)).fetchone()) == {"n": 1}
    params = {"now": at(13 + 3600), "keep_s": 7200, "batch": 100}
    kept = await (await side.execute(query("prune_limit_waits"), params)).fetchone()
    assert kept == {"removed": 0}
    params["keep_s"] = 60
    gone = await (await side.execute(query("prune_limit_waits"), params)).fetchone()
    assert gone == {"removed": 1}


async def test_a_rate_key_lets_its_rate_in_every_period_while_jobs_wait(
    store: JobStore, open_session: Opener
) -> None:
    await store.limits.set("api", rate="6/10s")
    await store.definitions.apply(
        [JobSpec.build(f"call-{i}", "@every 1s", HANDLER, uses="api") for i in range(8)], now=T0
    )
    n1 = await open_session("n1")
    await n1.try_lock(ALL)
    starts: list[float] = []
    for t in range(1, 61):
        for job in (await n1.claim(ALL, 10, 30.0, now=at(t))).jobs:
            starts.append(t)
            await n1.completions.complete([completion(job, at(t))], now=at(t))
    # Six in the first second, then six more once each ten seconds have passed.
    assert [starts.count(t) for t in (1, 11, 21, 31, 41, 51)] == [6] * 6, starts
    assert len(starts) == 36
