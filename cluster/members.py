"""The member registry in Redis: heartbeats, the live member list, join/leave signals.

A sorted set maps node id -> time of its last heartbeat by the REDIS clock (``TIME`` inside
a script), so node clocks never decide liveness. One script call renews a heartbeat,
evicts expired members, publishes joins and leaves, and returns the live list. Redis only
expresses the desired assignment; losing it delays rebalancing and nothing else.

The same call records how long the node's lock session has waited for Postgres without an
answer, in a hash beside the member info (absent: it answers), and returns every member's:
a peer ends the idle session of a node that reports a stall (docs/design/lock-session.md).
The member info is unchanged, so releases before this one read and write it as before.

A ``redis+sentinel://`` URL connects through Sentinel: every new connection asks the
sentinels for the current primary, and a connection to a demoted primary is dropped on its
first refused write, so after a failover the next heartbeat reaches the new primary.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import redis.asyncio as aioredis
from redis.asyncio.sentinel import Sentinel
from redis.exceptions import RedisError

from cluster.errors import MembershipError
from cluster.settings import ClusterSettings
from cluster.urls import SENTINEL_SCHEME, sentinel_target

logger = logging.getLogger(__name__)

_HEARTBEAT = """
local members, unanswered, channel, prefix = KEYS[1], KEYS[2], ARGV[1], ARGV[2]
local id, ttl_ms, info, waited_ms = ARGV[3], tonumber(ARGV[4]), ARGV[5], ARGV[6]
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local expired = redis.call('ZRANGEBYSCORE', members, '-inf', now - ttl_ms)
for _, gone in ipairs(expired) do
  if gone ~= id then
    redis.call('ZREM', members, gone)
    redis.call('DEL', prefix .. gone)
    redis.call('HDEL', unanswered, gone)
    redis.call('PUBLISH', channel, 'leave:' .. gone)
  end
end
local added = redis.call('ZADD', members, now, id)
redis.call('SET', prefix .. id, info, 'PX', ttl_ms)
if waited_ms == '' then
  redis.call('HDEL', unanswered, id)
else
  redis.call('HSET', unanswered, id, waited_ms)
end
if added == 1 then redis.call('PUBLISH', channel, 'join:' .. id) end
local live = redis.call('ZRANGEBYSCORE', members, '(' .. (now - ttl_ms), '+inf', 'WITHSCORES')
local out = {}
for i = 1, #live, 2 do
  out[#out + 1] = live[i]
  out[#out + 1] = tostring(now - tonumber(live[i + 1]))
end
return {out, redis.call('HGETALL', unanswered)}
"""

_SNAPSHOT = """
local members, prefix, ttl_ms = KEYS[1], ARGV[1], tonumber(ARGV[2])
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local out = {tostring(now)}
local live = redis.call('ZRANGEBYSCORE', members, '(' .. (now - ttl_ms), '+inf', 'WITHSCORES')
for i = 1, #live, 2 do
  out[#out + 1] = live[i]
  out[#out + 1] = live[i + 1]
  out[#out + 1] = redis.call('GET', prefix .. live[i]) or ''
end
return out
"""


@dataclass(frozen=True)
class MemberInfo:
    node_id: str
    zone: str
    host: str
    pid: int
    started_at: str
    version: str
    concurrency: int
    fenced_writes: int = 0  # stale writes this node had rejected since it started


@dataclass(frozen=True)
class Beat:
    """What one heartbeat learned: every live member's heartbeat age, and how long the lock
    session of each member that reports a wait has gone without an answer (seconds)."""

    ages: dict[str, float]
    unanswered: dict[str, float]


@dataclass(frozen=True)
class LiveMember:
    info: MemberInfo
    heartbeat_age_s: float


def connect_redis(url: str, timeout_s: float) -> tuple[aioredis.Redis, list[aioredis.Redis]]:
    """A client of the Redis primary ``url`` names, directly or through its sentinels; and
    the clients of those sentinels, which closing the first leaves open."""
    options: dict[str, Any] = {
        "socket_timeout": timeout_s,
        "socket_connect_timeout": timeout_s,
        "health_check_interval": 0,
        "decode_responses": True,
    }
    if not url.startswith(SENTINEL_SCHEME + "://"):
        return aioredis.Redis.from_url(url, **options), []
    target = sentinel_target(url)
    sentinel_options: dict[str, Any] = {
        "socket_timeout": timeout_s,
        "socket_connect_timeout": timeout_s,
    }
    if target.sentinel_password is not None:
        sentinel_options["password"] = target.sentinel_password
    sentinel = Sentinel(list(target.sentinels), sentinel_kwargs=sentinel_options, **options)
    primary: aioredis.Redis = sentinel.master_for(
        target.service, db=target.db, username=target.username, password=target.password
    )
    return primary, list(sentinel.sentinels)


class MemberRegistry:
    def __init__(self, settings: ClusterSettings, *, timeout_s: float = 2.0) -> None:
        self._prefix = settings.key_prefix
        self._members_key = self._prefix + "members"
        self._unanswered_key = self._prefix + "unanswered"
        self._info_prefix = self._prefix + "node:"
        self.channel = self._prefix + "membership"
        self._presence_prefix = self._prefix + "present:"
        self._redis, self._sentinels = connect_redis(settings.redis_url, timeout_s)
        self._heartbeat = self._redis.register_script(_HEARTBEAT)
        # The info a node sends changes rarely (its fenced-write count); it is encoded
        # once per change, not on every beat.
        self._sent: tuple[MemberInfo, str] | None = None
        self._snapshot = self._redis.register_script(_SNAPSHOT)

    async def close(self) -> None:
        try:
            await self._redis.aclose()
        finally:
            for sentinel in self._sentinels:
                await sentinel.aclose()

    async def heartbeat(self, info: MemberInfo, ttl_s: float) -> list[str]:
        """Renew ``info``'s heartbeat; return the sorted live member ids."""
        return sorted((await self.beat(info, ttl_s)).ages)

    async def beat(self, info: MemberInfo, ttl_s: float, *, unanswered_s: float = 0.0) -> Beat:
        """Renew ``info``'s heartbeat, reporting how long its lock session has gone without
        an answer (0: it answers); return each live member's heartbeat age (by Redis's
        clock: a frozen member's grows while its connections stay open) and report."""
        if self._sent is None or self._sent[0] != info:
            self._sent = (info, json.dumps(asdict(info)))
        args: list[str | int] = [
            self.channel,
            self._info_prefix,
            info.node_id,
            int(ttl_s * 1000),
            self._sent[1],
            str(int(unanswered_s * 1000)) if unanswered_s > 0 else "",
        ]
        try:
            live, waits = await self._heartbeat(
                keys=[self._members_key, self._unanswered_key], args=args
            )
        except (RedisError, OSError) as exc:
            raise MembershipError(f"heartbeat failed: {exc}") from exc
        ages = {str(live[i]): int(live[i + 1]) / 1000 for i in range(0, len(live), 2)}
        reported = {str(waits[i]): int(waits[i + 1]) / 1000 for i in range(0, len(waits), 2)}
        return Beat(ages, {m: s for m, s in reported.items() if m in ages})

    async def connected(self, node_ids: Sequence[str]) -> set[str]:
        """The given nodes whose membership subscription is open right now.

        Each node's subscription also listens on a channel of its own, so Redis drops it
        the moment the node's process dies: unlike its heartbeat, which outlives it by up
        to the TTL, this says at once whether the process is still connected."""
        if not node_ids:
            return set()
        try:
            counts = await self._redis.pubsub_numsub(*(self._presence_prefix + n for n in node_ids))
        except (RedisError, OSError) as exc:
            raise MembershipError(f"cannot read subscriptions: {exc}") from exc
        cut = len(self._presence_prefix)
        return {str(channel)[cut:] for channel, count in counts if int(count) > 0}

    async def deregister(self, node_id: str) -> None:
        try:
            async with self._redis.pipeline(transaction=True) as pipe:
                pipe.zrem(self._members_key, node_id)
                pipe.delete(self._info_prefix + node_id)
                pipe.hdel(self._unanswered_key, node_id)
                pipe.publish(self.channel, f"leave:{node_id}")
                await pipe.execute()
        except (RedisError, OSError) as exc:
            raise MembershipError(f"deregister failed: {exc}") from exc

    async def forget_cluster(self) -> None:
        """Delete every key of this cluster (a throwaway cluster's teardown)."""
        try:
            keys = [key async for key in self._redis.scan_iter(match=self._prefix + "*")]
            if keys:
                await self._redis.delete(*keys)
        except (RedisError, OSError) as exc:
            raise MembershipError(f"cannot delete the cluster's keys: {exc}") from exc

    async def live(self, ttl_s: float) -> list[LiveMember]:
        """Every live member with its info and heartbeat age (for status views)."""
        try:
            raw = await self._snapshot(
                keys=[self._members_key], args=[self._info_prefix, int(ttl_s * 1000)]
            )
        except (RedisError, OSError) as exc:
            raise MembershipError(f"cannot read members: {exc}") from exc
        now_ms = int(raw[0])
        found = []
        for i in range(1, len(raw), 3):
            node_id, score, text = raw[i], float(raw[i + 1]), raw[i + 2]
            data: dict[str, Any] = json.loads(text) if text else {}
            info = MemberInfo(
                node_id=node_id,
                zone=str(data.get("zone", "?")),
                host=str(data.get("host", "?")),
                pid=int(data.get("pid", 0)),
                started_at=str(data.get("started_at", "")),
                version=str(data.get("version", "?")),
                concurrency=int(data.get("concurrency", 0)),
                fenced_writes=int(data.get("fenced_writes", 0)),
            )
            found.append(LiveMember(info, max(0.0, (now_ms - score) / 1000)))
        return sorted(found, key=lambda m: m.info.node_id)

    async def watch(
        self,
        on_change: Callable[[str], Awaitable[None]],
        stop: asyncio.Event,
        node_id: str | None = None,
    ) -> None:
        """Call ``on_change(message)`` for every join/leave until ``stop`` is set; with
        ``node_id``, the subscription also marks that node as connected (``connected``).

        Between messages it waits on the subscription's socket and on ``stop``, not on a
        timer: an idle node should spend nothing on a subscription that has nothing to say.

        Raises MembershipError when the subscription breaks; the caller retries.
        """
        pubsub = self._redis.pubsub(ignore_subscribe_messages=True)
        stopping = asyncio.ensure_future(stop.wait())
        reading: asyncio.Future[Any] | None = None
        try:
            channels = [self.channel]
            if node_id is not None:
                channels.append(self._presence_prefix + node_id)
            await pubsub.subscribe(*channels)
            while not stop.is_set():
                reading = asyncio.ensure_future(pubsub.get_message(timeout=None))
                await asyncio.wait((reading, stopping), return_when=asyncio.FIRST_COMPLETED)
                if not reading.done():
                    break  # stopped: the read is abandoned with the subscription
                message = reading.result()
                if message is not None:
                    await on_change(str(message["data"]))
        except (RedisError, OSError) as exc:
            raise MembershipError(f"membership subscription broke: {exc}") from exc
        finally:
            stopping.cancel()
            if reading is not None and not reading.done():
                reading.cancel()
                with contextlib.suppress(asyncio.CancelledError, RedisError, OSError):
                    await reading
            with contextlib.suppress(RedisError, OSError):
                await pubsub.aclose()
