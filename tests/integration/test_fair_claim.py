"""Fair fan-out (docs/design/fairness.md): a claim asked to be fair takes the due jobs of
its shards across tenants in turn, oldest first within each, so a tenant with a few due
jobs is not queued behind one with many older ones; a plain claim stays oldest first."""

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


async def add(store: JobStore, tenant: str, count: int, created_s: float, first: int = 0) -> None:
    """``count`` jobs of ``tenant`` created at ``created_s``: due at the next 10 s mark."""
    specs = [
        JobSpec.build(f"{tenant}-{i:03d}", "@every 10s", "cluster.chaos.witness:record",
                      tenant=tenant)
        for i in range(first, first + count)
    ]  # fmt: skip
    for spec in specs:
        await store.definitions.add(spec, now=at(created_s))


@pytest.fixture
async def node(store: JobStore, open_session: Opener) -> LockSession:
    """A session holding every shard, over the jobs of a big and two small tenants."""
    # The big tenant's jobs are due at 10 s (the first 20) and 20 s; the others' at 20 s.
    await add(store, "big", 20, 0.0)
    await add(store, "big", 20, 10.0, first=20)
    await add(store, "small-b", 4, 12.0)
    await add(store, "small-c", 3, 12.0)
    session = await open_session("n1")
    await session.try_lock(ALL)
    return session


async def test_a_fair_claim_takes_the_tenants_in_turn(node: LockSession) -> None:
    claimed = (await node.claim(ALL, 9, 30.0, now=at(60), fair=True)).jobs
    assert Counter(j.tenant for j in claimed) == {"big": 3, "small-b": 3, "small-c": 3}
    # Oldest first within a tenant: the big tenant's first generation.
    assert {j.due for j in claimed if j.tenant == "big"} == {at(10)}
    # The next claim goes on in turn: what is left of the small tenants, then the big one.
    claimed = (await node.claim(ALL, 9, 30.0, now=at(60), fair=True)).jobs
    assert Counter(j.tenant for j in claimed) == {"big": 8, "small-b": 1}


async def test_a_plain_claim_takes_the_oldest_first(node: LockSession) -> None:
    claimed = (await node.claim(ALL, 9, 30.0, now=at(60))).jobs
    assert {j.tenant for j in claimed} == {"big"}
    assert {j.due for j in claimed} == {at(10)}


async def test_a_fair_claim_with_room_for_all_takes_all(node: LockSession) -> None:
    claimed = (await node.claim(ALL, 100, 30.0, now=at(60), fair=True)).jobs
    assert Counter(j.tenant for j in claimed) == {"big": 40, "small-b": 4, "small-c": 3}
    assert len({j.id for j in claimed}) == 47


async def test_a_fair_claim_reads_only_held_shards_and_due_jobs(node: LockSession) -> None:
    claimed = (await node.claim(ALL[:8], 100, 30.0, now=at(15), fair=True)).jobs
    assert claimed and {j.shard for j in claimed} <= set(ALL[:8])
    assert {(j.tenant, j.due) for j in claimed} == {("big", at(10))}  # the rest: due at 20


async def test_tenants_of_any_name_take_their_turns(store: JobStore, open_session: Opener) -> None:
    """The tenant list travels as Postgres array literals: names with the literal's own
    characters (commas, quotes, braces, backslashes, spaces, NULL) come back as they were."""
    names = ["a,b", 'q"uote', "{brace}", "back\\slash", " sp ace ", "NULL", "ünï"]
    await add(store, "big", 30, 0.0)
    for name in names:
        await add(store, name, 2, 0.0)
    session = await open_session("n1")
    await session.try_lock(ALL)
    claimed = (await session.claim(ALL, len(names) + 1, 30.0, now=at(60), fair=True)).jobs
    assert Counter(j.tenant for j in claimed) == {name: 1 for name in ["big", *names]}


async def test_a_tenant_new_since_the_walk_takes_turns_once_the_list_is_walked_again(
    store: JobStore, open_session: Opener
) -> None:
    """The list is kept between claims (tenantlist.py): a tenant whose jobs arrive after the
    walk, none of them among its shard's oldest, is claimed oldest first meanwhile, and
    takes its turns from the next walk on."""
    await add(store, "big", 320, 0.0)  # about 20 a shard: the heads of every shard
    session = await open_session("n1")
    session.tenants.max_age_s = 3600.0  # kept for as long as the test runs
    await session.try_lock(ALL)
    assert len((await session.claim(ALL, 2, 30.0, now=at(60), fair=True)).jobs) == 2
    await add(store, "late", 3, 12.0)  # due at 20 s, after the big tenant's oldest
    kept = (await session.claim(ALL, 2, 30.0, now=at(60), fair=True)).jobs
    assert "late" not in {j.tenant for j in kept}  # the kept list has no such tenant
    walked = (await session.claim(ALL, 2, 30.0, now=at(61), fair=True)).jobs  # another now
    assert Counter(j.tenant for j in walked) == {"big": 1, "late": 1}
