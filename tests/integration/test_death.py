"""Telling a death from a blip or a freeze (docs/design/recovery.md): the life lock tells a
peer at once that a lock session ended; the shard keeper counts a member without a session
as dead at once only when its Redis subscription is gone too (or its heartbeat is stale),
and ends the idle session of a member whose heartbeat went stale (a frozen node) or which
reports its session unanswered (a stalled one)."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator

import pytest

from cluster.members import MemberInfo, MemberRegistry
from cluster.settings import ClusterSettings
from cluster.store.connect import connect
from cluster.store.lock.lifelock import LifeWatch, life_key
from cluster.store.lock.session import LockSession, SessionLost
from node.membership.deathwatch import DeathWatch
from node.membership.shards import ShardKeeper
from node.state import NodeState
from node.stats import Stats
from tests.helpers.sessions import Opener
from tests.helpers.waiting import until


def _info(node_id: str) -> MemberInfo:
    return MemberInfo(node_id, "z", "host", 1, "2026-01-01T00:00:00+00:00", "dev", 8)


async def _no_recovery(shards: frozenset[int]) -> int:
    return 0


def _keeper(
    state: NodeState, session: LockSession, registry: MemberRegistry, frozen_s: float = 3.0
) -> ShardKeeper:
    return ShardKeeper(
        state,
        session,
        Stats(),
        _no_recovery,
        expected_shards=16,
        connected=registry.connected,
        evict=registry.deregister,
        frozen_s=frozen_s,
    )


def _heard(state: NodeState, ages: dict[str, float]) -> None:
    """``state`` as a heartbeat leaves it that has just read these heartbeat ages."""
    now = time.monotonic()
    state.beats = {member: now - age for member, age in ages.items()}
    state.beats_read = now


@pytest.fixture
async def registry(settings: ClusterSettings) -> AsyncIterator[MemberRegistry]:
    made = MemberRegistry(settings)
    yield made
    await made.close()


@contextlib.asynccontextmanager
async def subscribed(settings: ClusterSettings, node_id: str) -> AsyncIterator[None]:
    """``node_id``'s membership subscription, open while inside (a live process's)."""
    registry, stop = MemberRegistry(settings), asyncio.Event()

    async def ignore(message: str) -> None:
        return None

    task = asyncio.create_task(registry.watch(ignore, stop, node_id))
    try:
        await until(lambda: registry.connected([node_id]), f"{node_id} subscribed")
        yield
    finally:
        stop.set()
        await task
        await registry.close()


async def test_life_keys_are_below_every_probe_and_shard() -> None:
    keys = {life_key(f"n{i}") for i in range(1000)}
    assert len(keys) == 1000
    assert all(-(2**31) <= k < -(2**22) for k in keys)


async def test_a_watcher_is_granted_the_life_lock_when_the_session_ends(
    settings: ClusterSettings, open_session: Opener
) -> None:
    peer = await open_session("peer")
    assert peer.life_locked and await peer.my_locks() == set()  # not a shard
    watch = LifeWatch(settings, "watcher")
    try:
        assert not await watch.wait_gone("peer", 0.2)  # alive: the wait times out
        waiting = asyncio.create_task(watch.wait_gone("peer", 30.0))
        await asyncio.sleep(0)
        await peer.close()  # the process died
        assert await asyncio.wait_for(waiting, 30.0)
        # Released again at once: a new session of that node takes its life lock back.
        again = await open_session("peer")
        assert again.life_locked
    finally:
        await watch.close()


async def test_the_death_watch_wakes_the_keeper_when_its_peer_dies(
    settings: ClusterSettings, open_session: Opener
) -> None:
    peer = await open_session("b")
    state = NodeState("a", "z", 16)
    state.set_live(["a", "b"])
    state.rebalance.clear()
    watch = DeathWatch(state, LifeWatch(settings, "a"), wait_s=30.0)
    try:
        running = asyncio.create_task(watch.run_once())
        await asyncio.sleep(0)
        assert not state.rebalance.is_set()
        await peer.close()
        await asyncio.wait_for(running, 30.0)
        assert state.rebalance.is_set()
    finally:
        await watch.close()


async def test_a_member_without_session_or_subscription_is_dead_at_once_and_evicted(
    settings: ClusterSettings, open_session: Opener, registry: MemberRegistry
) -> None:
    session = await open_session("a")
    await registry.heartbeat(_info("a"), ttl_s=60)
    assert await registry.heartbeat(_info("dead"), ttl_s=60) == ["a", "dead"]
    state = NodeState("a", "z", 16)
    state.set_live(["a", "dead"])
    keeper = _keeper(state, session, registry)
    # Its heartbeat would live for another minute; its shards move now.
    assert await keeper.members_alive() == ("a",)
    assert [m.info.node_id for m in await registry.live(ttl_s=60)] == ["a"]


async def test_a_member_that_lost_only_its_session_keeps_its_grace(
    settings: ClusterSettings, open_session: Opener, registry: MemberRegistry
) -> None:
    session = await open_session("a")
    await registry.heartbeat(_info("blipped"), ttl_s=60)
    state = NodeState("a", "z", 16)
    state.set_live(["a", "blipped"])
    keeper = _keeper(state, session, registry)
    async with subscribed(settings, "blipped"):
        # No session (it is reconnecting), but the process is still connected to Redis.
        assert await keeper.members_alive() == ("a", "blipped")
        assert "blipped" in {m.info.node_id for m in await registry.live(ttl_s=60)}
    # The subscription gone as well: now a death.
    assert await keeper.members_alive() == ("a",)


async def test_a_frozen_member_loses_its_session_and_counts_as_dead(
    settings: ClusterSettings, open_session: Opener, registry: MemberRegistry
) -> None:
    session = await open_session("a")
    frozen = await open_session("frozen")  # connected, and silent from now on
    await registry.heartbeat(_info("frozen"), ttl_s=60)
    state = NodeState("a", "z", 16)
    state.set_live(["a", "frozen"])
    keeper = _keeper(state, session, registry, frozen_s=0.3)
    async with subscribed(settings, "frozen"):  # both connections open: only silent
        _heard(state, {"a": 0.0, "frozen": 0.1})  # a fresh heartbeat: not frozen
        assert await keeper.members_alive() == ("a", "frozen")
        await until(lambda: idle_past(session, "frozen"), "the frozen session to idle 0.3 s")
        _heard(state, {"a": 0.0, "frozen": 0.1})  # idle, but still beating (a long poll)
        assert await keeper.members_alive() == ("a", "frozen")
        assert await session.peers.live_sessions(["frozen"]) == {"frozen"}
        _heard(state, {"a": 0.0, "frozen": 5.0})  # and now a stale heartbeat
        assert await keeper.members_alive() == ("a",)

    async def ended() -> bool:  # the backend was told to end; it exits a moment later
        return await session.peers.live_sessions(["frozen"]) == set()

    await until(ended, "the frozen session to end")
    assert [m.info.node_id for m in await registry.live(ttl_s=60)] == []
    with pytest.raises(SessionLost):  # what it would claim on next has nowhere to run
        await frozen.ping()


async def test_a_frozen_members_open_transaction_ends_with_its_session(
    settings: ClusterSettings, open_session: Opener, registry: MemberRegistry
) -> None:
    """A member stopped between a fenced completion and its commit (effects) holds the job
    row in an open transaction on another connection; it must not outlive the judgement,
    or recovery could not take the slot back until the member woke."""
    session = await open_session("a")
    await open_session("frozen")
    parked = await connect(settings, "frozen/effects")
    other = await connect(settings, "pulse-test")
    try:
        await parked.execute("BEGIN")  # (autocommit connection) a transaction left open
        await parked.execute("SELECT pg_advisory_xact_lock(4242)")

        async def free() -> bool:
            cur = await other.execute("SELECT pg_try_advisory_xact_lock(4242) AS got")
            row = await cur.fetchone()
            return bool(row and row["got"])

        await registry.heartbeat(_info("frozen"), ttl_s=60)
        state = NodeState("a", "z", 16)
        state.set_live(["a", "frozen"])
        keeper = _keeper(state, session, registry, frozen_s=0.3)
        assert not await free()
        async with subscribed(settings, "frozen"):
            await until(lambda: idle_past(session, "frozen"), "the frozen session to idle")
            _heard(state, {"a": 0.0, "frozen": 5.0})
            assert await keeper.members_alive() == ("a",)

        await until(free, "the frozen member's open transaction to end")
    finally:
        await parked.close()
        await other.close()


async def test_a_stale_view_of_redis_ends_no_session(
    settings: ClusterSettings, open_session: Opener, registry: MemberRegistry
) -> None:
    """A node that cannot read Redis sees every heartbeat age as it last read it: that
    old view must not make a quiet peer look frozen."""
    session = await open_session("a")
    await open_session("quiet")
    await registry.heartbeat(_info("quiet"), ttl_s=60)
    state = NodeState("a", "z", 16)
    state.set_live(["a", "quiet"])
    keeper = _keeper(state, session, registry, frozen_s=0.3)
    _heard(state, {"a": 0.0, "quiet": 5.0})
    state.beats_read -= 10  # read long ago
    await until(lambda: idle_past(session, "quiet"), "the quiet session to idle")
    assert await keeper.members_alive() == ("a", "quiet")
    assert await session.peers.live_sessions(["quiet"]) == {"quiet"}


async def idle_past(session: LockSession, node_id: str) -> bool:
    """``node_id``'s lock session has idled longer than the tests' freeze limit."""
    return (await session.peers.member_sessions([node_id])).get(node_id, 0.0) > 0.3


async def test_a_freeze_limit_of_zero_ends_no_session(
    settings: ClusterSettings, open_session: Opener, registry: MemberRegistry
) -> None:
    """``--freeze-limit 0``: a silent peer's session is left to its own session timeout."""
    session = await open_session("a")
    await open_session("quiet")
    await registry.heartbeat(_info("quiet"), ttl_s=60)
    state = NodeState("a", "z", 16)
    state.set_live(["a", "quiet"])
    keeper = _keeper(state, session, registry, frozen_s=0)
    await until(lambda: idle_past(session, "quiet"), "the quiet session to idle")
    _heard(state, {"a": 0.0, "quiet": 60.0})
    assert await keeper.members_alive() == ("a", "quiet")
    assert await session.peers.live_sessions(["quiet"]) == {"quiet"}


async def test_a_member_reporting_a_stall_keeps_its_session_while_a_statement_runs(
    settings: ClusterSettings, open_session: Opener, registry: MemberRegistry
) -> None:
    """A node waiting on a slow Postgres reports its session unanswered too, but its
    statement runs (``active``, not idle): only once the session has idled past the freeze
    limit as well is it ended, and the member is out without a grace (a stall)."""
    session = await open_session("a")
    busy = await connect(settings, "busy", statement_timeout_s=30, autocommit=True)
    await registry.heartbeat(_info("busy"), ttl_s=60)
    state = NodeState("a", "z", 16)
    state.set_live(["a", "busy"])
    keeper = _keeper(state, session, registry, frozen_s=0.3)
    try:
        async with subscribed(settings, "busy"):
            running = asyncio.create_task(busy.execute("SELECT pg_sleep(1.5)"))
            await until(lambda: _active(session, "busy"), "the slow statement to run")
            _heard(state, {"a": 0.0, "busy": 0.1})
            state.unanswered = {"busy": 5.0}
            assert await keeper.members_alive() == ("a", "busy")
            await running
            await until(lambda: idle_past(session, "busy"), "the session to idle 0.3 s")
            _heard(state, {"a": 0.0, "busy": 0.1})
            assert await keeper.members_alive() == ("a",)
            _heard(state, {"a": 0.0, "busy": 0.1})  # the next beat's view, its report standing
            assert await keeper.members_alive() == ("a",)  # no grace
            assert [m.info.node_id for m in await registry.live(ttl_s=60)] == ["busy"]
    finally:
        await busy.close()


async def _active(session: LockSession, node_id: str) -> bool:
    """``node_id`` has a session and it is running a statement (idle for 0 s)."""
    return (await session.peers.member_sessions([node_id])).get(node_id) == 0.0


async def test_ending_a_session_says_whether_it_ended_was_used_or_was_gone(
    settings: ClusterSettings, open_session: Opener
) -> None:
    """``end_frozen_session`` on the server: an idle session past the limit is ended; one
    used within it is kept (``used``); a node with no session left is ``gone``, so the
    keeper counts it out rather than keep what it read a moment before."""
    session = await open_session("a")
    other = await connect(settings, "other", statement_timeout_s=30, autocommit=True)
    try:
        assert await session.peers.end_frozen_session("other", 60.0) == "used"
        await until(lambda: idle_past(session, "other"), "the session to idle 0.3 s")
        assert await session.peers.end_frozen_session("other", 0.3) == "ended"
        await until(lambda: _no_session(session, "other"), "the ended backend to exit")
        assert await session.peers.end_frozen_session("other", 0.3) == "gone"
        assert await session.peers.end_frozen_session("nobody", 0.3) == "gone"
    finally:
        await other.close()


async def _no_session(session: LockSession, node_id: str) -> bool:
    return node_id not in await session.peers.member_sessions([node_id])
