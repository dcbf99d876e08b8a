"""Priorities (docs/design/fairness.md, "Priorities"): a tenant's places in a claim go to its
jobs with the highest priority first, wherever they lie in its shards; which places a tenant
gets, and fairness across tenants, are what they are without priorities."""

from __future__ import annotations

from collections import Counter
from datetime import UTC, datetime, timedelta

import pytest

from cluster.jobs.spec import JobSpec
from cluster.store.jobstore.store import JobStore
from cluster.store.lock.session import LockSession
from tests.helpers.sessions import Opener

T0 = datetime(2026, 1, 1, tzinfo=UTC)
ALL = list(range(16))


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


async def add(
    store: JobStore, tenant: str, names: list[str], created_s: float, priority: int = 0
) -> None:
    """Jobs of ``tenant`` created at ``created_s``: due at the next 10 s mark."""
    for name in names:
        spec = JobSpec.build(name, "@every 10s", "cluster.chaos.witness:record", tenant=tenant,
                             priority=priority)  # fmt: skip
        await store.definitions.add(spec, now=at(created_s))


def names(prefix: str, count: int) -> list[str]:
    return [f"{prefix}-{i:03d}" for i in range(count)]


@pytest.fixture
async def session(open_session: Opener) -> LockSession:
    found = await open_session("n1")
    await found.try_lock(ALL)
    return found


async def test_a_tenants_places_go_to_its_highest_priority_first(
    store: JobStore, session: LockSession
) -> None:
    # Twenty jobs due at 10 s; two younger ones (due at 20 s) with priorities, in whatever
    # shards their names hash to.
    await add(store, "t", names("old", 20), 0.0)
    await add(store, "t", ["urgent"], 12.0, priority=90)
    await add(store, "t", ["soon"], 12.0, priority=10)
    claimed = (await session.claim(ALL, 3, 30.0, now=at(60))).jobs
    assert {j.name for j in claimed} >= {"urgent", "soon"}
    assert len(claimed) == 3
    # The next claims take the rest oldest first: none is left behind.
    rest = (await session.claim(ALL, 100, 30.0, now=at(60))).jobs
    assert len(rest) == 19


async def test_priority_orders_the_jobs_not_the_time_a_place_is_given(
    store: JobStore, session: LockSession
) -> None:
    # Tenant a's jobs are due at 10 s, one of them only at 20 s with a priority; tenant b's
    # at 20 s. Oldest first gives a every place of a claim of 3 (its due times are the
    # oldest), and its prioritized job takes the first of them.
    await add(store, "a", names("a", 4), 0.0)
    await add(store, "a", ["a-urgent"], 12.0, priority=50)
    await add(store, "b", names("b", 4), 12.0)
    claimed = (await session.claim(ALL, 3, 30.0, now=at(60))).jobs
    assert {j.tenant for j in claimed} == {"a"}
    assert "a-urgent" in {j.name for j in claimed}


async def test_a_priority_never_moves_a_tenant_ahead_of_another(
    store: JobStore, session: LockSession
) -> None:
    # Every job of `loud` has the highest priority; `quiet`'s have none. A fair claim still
    # takes the tenants in turn.
    await add(store, "loud", names("loud", 10), 0.0, priority=100)
    await add(store, "quiet", names("quiet", 10), 0.0)
    claimed = (await session.claim(ALL, 6, 30.0, now=at(60), fair=True)).jobs
    assert Counter(j.tenant for j in claimed) == {"loud": 3, "quiet": 3}


async def test_a_fair_turn_goes_to_the_tenants_highest_priority(
    store: JobStore, session: LockSession
) -> None:
    await add(store, "big", names("big", 30), 0.0)
    await add(store, "big", ["big-urgent"], 12.0, priority=7)
    await add(store, "small", names("small", 3), 0.0)
    claimed = (await session.claim(ALL, 2, 30.0, now=at(60), fair=True)).jobs
    assert Counter(j.tenant for j in claimed) == {"big": 1, "small": 1}
    assert "big-urgent" in {j.name for j in claimed}


async def test_higher_priorities_go_first_and_ties_oldest_first(
    store: JobStore, session: LockSession
) -> None:
    await add(store, "t", names("plain", 10), 0.0)
    await add(store, "t", ["p5-old"], 0.0, priority=5)
    await add(store, "t", ["p5-young"], 12.0, priority=5)
    await add(store, "t", ["p9"], 12.0, priority=9)
    taken: list[str] = []
    for _ in range(3):
        taken += [j.name for j in (await session.claim(ALL, 1, 30.0, now=at(60))).jobs]
    assert taken == ["p9", "p5-old", "p5-young"]


async def test_a_change_of_priority_is_a_revision(store: JobStore) -> None:
    await add(store, "t", ["j"], 0.0)
    spec = JobSpec.build("j", "@every 10s", "cluster.chaos.witness:record", tenant="t",
                         priority=40)  # fmt: skip
    await store.definitions.apply([spec], now=at(1))
    job = await store.get("j", tenant="t")
    assert job.priority == 40
    history = await store.revisions.history("j", tenant="t")
    assert history[0].diff == {"priority": [0, 40]}


async def test_a_slot_past_its_late_after_goes_ahead_of_every_priority(
    store: JobStore, session: LockSession
) -> None:
    # The plain job is due at 10 s, late after 60 s; jobs of priority 90 are due at 70 s.
    await add(store, "t", ["plain"], 0.0)
    await add(store, "t", names("urgent", 5), 62.0, priority=90)
    # At 70 s the plain slot is not late yet: priority first.
    taken = [j.name for j in (await session.claim(ALL, 1, 30.0, now=at(70))).jobs]
    assert taken != ["plain"] and len(taken) == 1
    # Past its late-after, it goes ahead of them: a lower priority waits that long at most.
    taken = [j.name for j in (await session.claim(ALL, 1, 30.0, now=at(71))).jobs]
    assert taken == ["plain"]
