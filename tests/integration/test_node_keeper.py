"""The shard keeper on real Postgres: handover between nodes, and the orderings that keep
a shard from being claimed by a node that no longer (or not yet) owns it."""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence

import pytest

from cluster.errors import StoreError
from cluster.settings import ClusterSettings
from cluster.store.jobstore.store import JobStore
from cluster.store.lock.session import LockSession, SessionLost
from node.membership.shards import ShardKeeper
from node.state import NodeState
from node.stats import Stats
from ring import Ring

ALL = frozenset(range(16))


class RecordingSession(LockSession):
    """A lock session that remembers which shards its node counted as held at each unlock."""

    state: NodeState
    held_at_unlock: list[tuple[frozenset[int], frozenset[int]]]

    async def unlock(self, shards: Sequence[int]) -> set[int]:
        self.held_at_unlock.append((frozenset(shards), self.state.held))
        return await super().unlock(shards)


async def _no_recovery(shards: frozenset[int]) -> int:
    return 0


class Node:
    def __init__(self, settings: ClusterSettings, node_id: str) -> None:
        self.state = NodeState(node_id, "z", 16)
        self.session = RecordingSession(
            settings, node_id, "z", session_timeout_s=10, statement_timeout_s=5
        )
        self.session.state = self.state
        self.session.held_at_unlock = []
        self.recovered: list[frozenset[int]] = []
        self.fail_recovery = 0
        self.keeper = ShardKeeper(
            self.state, self.session, Stats(), self.recover, expected_shards=16
        )

    async def recover(self, shards: frozenset[int]) -> int:
        if self.fail_recovery:
            self.fail_recovery -= 1
            raise StoreError("recovery: canceling statement due to statement timeout")
        self.recovered.append(shards)
        return 0


@pytest.fixture
async def nodes(store: JobStore, settings: ClusterSettings) -> AsyncIterator[list[Node]]:
    made = [Node(settings, "n1"), Node(settings, "n2")]
    for node in made:
        await node.session.open()
    yield made
    for node in made:
        await node.session.close()


async def test_shards_move_to_a_joining_node_without_ever_being_held_twice(
    nodes: list[Node],
) -> None:
    n1, n2 = nodes
    n1.state.set_live(["n1"])
    await n1.keeper.run_once()
    assert n1.state.held == ALL and await n1.session.my_locks() == ALL

    for node in nodes:
        node.state.set_live(["n1", "n2"])
    ring = Ring(["n1", "n2"])
    want1, want2 = ring.owned("n1", 16), ring.owned("n2", 16)
    assert want1 and want2

    # n2 asks first: every shard it wants is still locked by n1, so it gets none yet.
    assert await n2.keeper.run_once() is not None  # retry soon
    assert n2.state.held == frozenset() and n2.state.desired == want2
    # n1 lets go of n2's shards; it never counted them as held while unlocking them.
    assert await n1.keeper.run_once() is None
    assert n1.state.held == want1 and await n1.session.my_locks() == want1
    ((released, held_meanwhile),) = n1.session.held_at_unlock
    assert released == want2 and not (released & held_meanwhile)
    # n2 takes them, recovering each before counting it as held.
    assert await n2.keeper.run_once() is None
    assert n2.state.held == want2 and await n2.session.my_locks() == want2
    assert n2.recovered == [want2]

    # n2 leaves (deregistered): n1 takes everything back.
    await n2.keeper.release_all()
    n1.state.set_live(["n1"])
    await n1.keeper.run_once()
    assert n1.state.held == ALL and await n1.session.my_locks() == ALL


async def test_a_shard_whose_recovery_failed_is_unlocked_not_leaked(
    nodes: list[Node],
) -> None:
    n1, n2 = nodes
    n1.state.set_live(["n1"])
    n1.fail_recovery = 1
    with pytest.raises(StoreError):
        await n1.keeper.run_once()
    # Not recovered, so not claimable here, and not locked either: another node may take it.
    assert n1.state.held == frozenset()
    assert await n1.session.my_locks() == set()
    assert await n2.session.try_lock(sorted(ALL)) == ALL
    await n2.session.unlock(sorted(ALL))

    await n1.keeper.run_once()
    assert n1.state.held == ALL and n1.recovered == [ALL]
    # Each shard is locked once: a single unlock per shard frees them all.
    assert await n1.session.unlock(sorted(ALL)) == ALL
    assert await n1.session.my_locks() == set()


async def test_a_new_session_takes_back_untracked_runs_once_before_its_shards(
    store: JobStore, settings: ClusterSettings
) -> None:
    node = Node(settings, "n1")
    failures: list[StoreError] = []
    calls: list[frozenset[int]] = []

    async def take_back() -> int:
        calls.append(node.state.held)  # before any shard is locked again
        if failures:
            raise failures.pop(0)
        return 0

    keeper = ShardKeeper(
        node.state, node.session, Stats(), _no_recovery, expected_shards=16, take_back=take_back
    )
    node.state.set_live(["n1"])
    await node.session.open()  # as the node opens it at start
    try:
        await keeper.run_once()  # the first session of the process: nothing to take back
        assert calls == [] and node.state.held == ALL

        failures.append(SessionLost("held_runs: no answer within 5.0s"))
        node.state.session_untrusted()
        with pytest.raises(SessionLost):
            await keeper.run_once()
        await keeper.run_once()  # retried on the next session, then the shards
        assert calls == [frozenset(), frozenset()] and node.state.held == ALL
        await keeper.run_once()
        assert len(calls) == 2

        # Any other failure leaves those runs to their leases: the shards come first.
        failures.append(StoreError("held_runs: canceling statement due to statement timeout"))
        node.state.session_untrusted()
        await keeper.run_once()
        await keeper.run_once()
        assert len(calls) == 3 and node.state.held == ALL
    finally:
        await node.session.close()
