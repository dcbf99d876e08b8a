"""The Redis member registry: heartbeats by the Redis clock, expiry, join/leave messages."""

from __future__ import annotations

import asyncio
from dataclasses import replace

import redis.asyncio

from cluster.members import MemberInfo, MemberRegistry
from cluster.settings import ClusterSettings
from tests.helpers.waiting import until

INFO = MemberInfo("n1", "a", "host", 1, "2026-01-01T00:00:00+00:00", "dev", 8)


async def test_heartbeat_lists_live_members_and_carries_their_info(
    settings: ClusterSettings,
) -> None:
    registry = MemberRegistry(settings)
    try:
        assert await registry.heartbeat(INFO, ttl_s=5) == ["n1"]
        other = replace(INFO, node_id="n0", zone="b", fenced_writes=3)
        assert await registry.heartbeat(other, ttl_s=5) == ["n0", "n1"]
        live = {m.info.node_id: m for m in await registry.live(ttl_s=5)}
        assert live["n0"].info.zone == "b" and live["n0"].info.fenced_writes == 3
        assert 0 <= live["n1"].heartbeat_age_s < 5
    finally:
        await registry.close()


async def test_a_changed_info_is_sent_on_the_next_heartbeat(settings: ClusterSettings) -> None:
    # The registry encodes a node's info once and reuses the text while it is unchanged.
    registry = MemberRegistry(settings)
    try:
        await registry.heartbeat(INFO, ttl_s=5)
        await registry.heartbeat(INFO, ttl_s=5)
        await registry.heartbeat(replace(INFO, fenced_writes=2), ttl_s=5)
        (member,) = await registry.live(ttl_s=5)
        assert member.info.fenced_writes == 2
        await registry.heartbeat(INFO, ttl_s=5)
        (member,) = await registry.live(ttl_s=5)
        assert member.info.fenced_writes == 0
    finally:
        await registry.close()


async def test_expired_member_is_evicted_and_a_leave_is_published(
    settings: ClusterSettings,
) -> None:
    registry = MemberRegistry(settings)
    messages: list[str] = []
    stop = asyncio.Event()

    async def on_change(message: str) -> None:
        messages.append(message)
        if "leave:gone" in messages:
            stop.set()

    watcher = asyncio.create_task(registry.watch(on_change, stop))
    try:
        await subscribed(settings, registry.channel)
        await registry.heartbeat(replace(INFO, node_id="gone"), ttl_s=0.2)
        # "gone" stops beating; n1 keeps beating with a longer TTL and evicts it.
        for _ in range(100):
            live = await registry.heartbeat(INFO, ttl_s=0.2)
            if live == ["n1"] and stop.is_set():
                break
            await asyncio.sleep(0.05)
        assert live == ["n1"]
        assert "join:gone" in messages and "leave:gone" in messages
    finally:
        stop.set()
        await watcher
        await registry.close()


async def subscribed(settings: ClusterSettings, channel: str) -> None:
    client = redis.asyncio.Redis.from_url(settings.redis_url)
    try:
        for _ in range(200):
            counts = dict(await client.pubsub_numsub(channel))
            if counts.get(channel.encode(), 0) >= 1:
                return
            await asyncio.sleep(0.01)
        raise AssertionError("the watcher never subscribed")
    finally:
        await client.aclose()


async def test_deregister_removes_the_member_at_once(settings: ClusterSettings) -> None:
    registry = MemberRegistry(settings)
    try:
        await registry.heartbeat(INFO, ttl_s=60)
        await registry.deregister("n1")
        assert await registry.live(ttl_s=60) == []
    finally:
        await registry.close()


async def test_watch_ends_at_stop_without_waiting_for_a_message(
    settings: ClusterSettings,
) -> None:
    registry = MemberRegistry(settings)
    stop = asyncio.Event()
    messages: list[str] = []

    async def on_change(message: str) -> None:
        messages.append(message)

    watcher = asyncio.create_task(registry.watch(on_change, stop))
    try:
        await subscribed(settings, registry.channel)
        await registry.heartbeat(INFO, ttl_s=5)
        await until(lambda: "join:n1" in messages, "the join:n1 message", 5, interval_s=0.01)
        stop.set()
        await asyncio.wait_for(watcher, timeout=10)
        await unsubscribed(settings, registry.channel)
    finally:
        stop.set()
        watcher.cancel()
        await registry.close()


async def unsubscribed(settings: ClusterSettings, channel: str) -> None:
    client = redis.asyncio.Redis.from_url(settings.redis_url)

    async def nobody_listens() -> bool:
        counts = dict(await client.pubsub_numsub(channel))
        return counts.get(channel.encode(), 0) == 0

    try:
        await until(nobody_listens, "the watcher to unsubscribe", 5, interval_s=0.01)
    finally:
        await client.aclose()


async def test_a_beat_reports_how_long_the_lock_session_went_unanswered(
    settings: ClusterSettings,
) -> None:
    """Every member learns each live member's report; a beat without one, an eviction or
    a deregistration clears it (docs/design/lock-session.md)."""
    registry = MemberRegistry(settings)
    other = replace(INFO, node_id="n0")
    try:
        await registry.beat(INFO, ttl_s=5, unanswered_s=3.25)
        beat = await registry.beat(other, ttl_s=5)
        assert beat.unanswered == {"n1": 3.25} and set(beat.ages) == {"n0", "n1"}
        await registry.beat(INFO, ttl_s=5)
        assert (await registry.beat(other, ttl_s=5)).unanswered == {}
        await registry.beat(INFO, ttl_s=5, unanswered_s=4.0)
        await registry.deregister("n1")
        assert (await registry.beat(other, ttl_s=5)).unanswered == {}
        await registry.beat(replace(INFO, node_id="gone"), ttl_s=0.2, unanswered_s=4.0)
        assert (await registry.beat(other, ttl_s=0.2)).unanswered == {"gone": 4.0}

        async def expired() -> bool:  # a member that stops beating takes its report along
            return (await registry.beat(other, ttl_s=0.2)).unanswered == {}

        await until(expired, "the report of an expired member to go", 5)
    finally:
        await registry.close()
