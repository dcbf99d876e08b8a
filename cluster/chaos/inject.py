"""Carries out a fault plan against the fleet, its proxies and the servers, on time.

Each fault is applied at its planned offset, held, then undone (a killed node is started
again under the same id, a stopped one continued, a proxy restored, a server restarted),
and recorded with the wall-clock times it actually began and ended. The poison job is
triggered and held until Pulse has recorded its slot, every node it killed restarted.

A failover kills the primary's host and waits for the standby's promotion (measured); the
lost server comes back as the new standby after the hold, so the next failover has one.
A Postgres failover's bound is its measured promotion time + the kill bound (+ the lease
with asynchronous replication, docs/design/failover.md); a Redis
failover's is the heartbeat TTL + the kill bound, held against how long after the kill
every running node heartbeats on the new primary.
"""

from __future__ import annotations

import asyncio
import logging
import signal
import time
from collections.abc import Awaitable, Callable

from cluster.chaos import poison
from cluster.chaos.fleet import Fleet, NodeProcess
from cluster.chaos.plan import Fault
from cluster.chaos.servers.pgha import PgFormation
from cluster.chaos.servers.proxy import Proxy
from cluster.chaos.servers.sentinel import SentinelSet
from cluster.chaos.servers.standalone import PostgresServer, RedisServer, ServerError
from cluster.chaos.verdict.observations import FaultRecord
from cluster.errors import MembershipError, PulseError
from cluster.jobs.models import JobStatus
from cluster.members import MemberRegistry
from cluster.settings import (
    DEFAULT_HEARTBEAT_INTERVAL_S,
    DEFAULT_HEARTBEAT_TTL_S,
    DEFAULT_LEASE_S,
    ClusterSettings,
)
from cluster.store.jobstore.store import JobStore

logger = logging.getLogger(__name__)

SETTLE_TIMEOUT_S = 60.0
FRESH_S = 2 * DEFAULT_HEARTBEAT_INTERVAL_S  # a heartbeat this recent is a live one


def _pg(node: NodeProcess) -> Proxy:
    assert node.pg is not None, "pg-stall needs the nodes' Postgres proxies"
    return node.pg


def _redis(node: NodeProcess) -> Proxy:
    assert node.redis is not None, "redis-cut needs the nodes' Redis proxies"
    return node.redis


_Switch = Callable[[NodeProcess], None]
# Faults switched on for every target node, held, then switched off: (on, off, report note).
_SWITCHED: dict[str, tuple[_Switch, _Switch, str]] = {
    "sigstop": (lambda n: n.signal(signal.SIGSTOP), lambda n: n.signal(signal.SIGCONT), "paused"),
    "pg-stall": (lambda n: _pg(n).stall(), lambda n: _pg(n).restore(), "postgres traffic stalled"),
    "pg-blip": (lambda n: _pg(n).cut(), lambda n: _pg(n).restore(), "postgres connections cut"),
    "redis-cut": (lambda n: _redis(n).cut(), lambda n: _redis(n).restore(), "redis traffic cut"),
}
_SWITCHED["sigstop-short"] = _SWITCHED["sigstop"]


class Injector:
    def __init__(
        self,
        fleet: Fleet,
        postgres: PostgresServer | None,
        redis: RedisServer | None,
        terminate: Callable[[str], Awaitable[int]],
        settings: ClusterSettings | None = None,
        *,
        formation: PgFormation | None = None,
        sentinels: SentinelSet | None = None,
    ) -> None:
        self._fleet = fleet
        self._postgres = postgres
        self._redis = redis
        self._terminate = terminate
        self._settings = settings  # for the poison job and the members of a Redis failover
        self._formation = formation
        self._sentinels = sentinels
        self._measured: tuple[float, float] | None = None  # (figure, bound) of a failover
        self.records: list[FaultRecord] = []

    async def run(self, plan: list[Fault], phase_start: float) -> None:
        """Apply every fault at ``phase_start`` (monotonic) + its offset."""
        for fault in plan:
            delay = phase_start + fault.at_s - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
            logger.info(
                "t+%.1fs %s %s (hold %.1fs)",
                time.monotonic() - phase_start,
                fault.kind,
                fault.label,
                fault.hold_s,
                extra={"event": "fault"},
            )
            started = time.time()
            self._measured = None
            detail = await self.apply(fault)
            measured, bound = self._measured or (None, fault.bound_s)
            self.records.append(
                FaultRecord(
                    kind=fault.kind,
                    label=fault.label,
                    targets=fault.targets,
                    started=started,
                    ended=time.time(),
                    bound_s=bound,
                    detail=detail,
                    measured_s=measured,
                )
            )

    def _nodes(self, fault: Fault) -> list[NodeProcess]:
        return [self._fleet.nodes[n] for n in fault.targets]

    async def apply(self, fault: Fault) -> str:
        """Inflict ``fault``, hold it, undo it; returns a note for the report."""
        nodes = self._nodes(fault)
        kind, hold = fault.kind, fault.hold_s
        if kind in ("sigkill", "zone-kill"):
            await asyncio.gather(*(self._fleet.kill(n) for n in nodes))
            await asyncio.sleep(hold)
            for node in nodes:
                await self._fleet.start(node)
            return f"restarted after {hold:.1f}s"
        if kind in _SWITCHED:
            begin, end, what = _SWITCHED[kind]
            for node in nodes:
                begin(node)
            await asyncio.sleep(hold)
            for node in nodes:
                end(node)
            return f"{what} {hold:.1f}s"
        if kind == "pg-terminate":
            ended = sum([await self._terminate(n.node_id) for n in nodes])
            return f"{ended} backends terminated"
        if kind == "poison-job":
            return await self._poison()
        if kind == "pg-failover":
            return await self._pg_failover(fault)
        if kind == "redis-failover":
            return await self._redis_failover(fault)
        if kind == "redis-restart":
            assert self._redis is not None
            await self._redis.stop()
            await asyncio.sleep(hold)
            await self._redis.start()
            return f"down {hold:.1f}s"
        assert kind == "pg-restart" and self._postgres is not None
        await self._postgres.stop(fault.mode)
        await asyncio.sleep(hold)
        await self._postgres.start()
        return f"{fault.mode} stop, down {hold:.1f}s"

    async def _pg_failover(self, fault: Fault) -> str:
        pg = self._formation
        assert pg is not None
        old, new, promotion_s = await asyncio.to_thread(pg.fail_primary)
        # Asynchronous replication may lose a completion: its slot runs again only once
        # the lease the new primary still shows has expired.
        lease_s = 0.0 if pg.synchronous else DEFAULT_LEASE_S
        self._measured = (promotion_s, promotion_s + fault.bound_s + lease_s)
        await asyncio.sleep(fault.hold_s)
        await asyncio.to_thread(pg.restart, old)
        await asyncio.to_thread(pg.wait, pg.settled, f"{old} to rejoin as a standby")
        return f"{old} killed, {new} promoted in {promotion_s:.1f}s; {old} back as its standby"

    async def _redis_failover(self, fault: Fault) -> str:
        sentinels = self._sentinels
        assert sentinels is not None
        killed_at = time.monotonic()
        old, new, promotion_s = await asyncio.to_thread(sentinels.fail_primary)
        settle_s = await self._members_settled(killed_at)
        self._measured = (settle_s, fault.bound_s)
        await asyncio.sleep(fault.hold_s)
        await asyncio.to_thread(sentinels.restart, old)
        await asyncio.to_thread(sentinels.wait, lambda: sentinels.replicating(old), "rejoin")
        return (
            f"{old} killed, {new} promoted in {promotion_s:.1f}s; every node heartbeating "
            f"on it {settle_s:.1f}s after the kill; {old} back as its replica"
        )

    async def _members_settled(self, since: float) -> float:
        """Seconds from ``since`` until every running node has a fresh heartbeat in Redis."""
        assert self._settings is not None
        registry = MemberRegistry(self._settings)
        deadline = time.monotonic() + SETTLE_TIMEOUT_S
        try:
            while time.monotonic() < deadline:
                running = {n.node_id for n in self._fleet if n.running}
                try:
                    live = await registry.live(DEFAULT_HEARTBEAT_TTL_S)
                except MembershipError:
                    live = []
                fresh = {m.info.node_id for m in live if m.heartbeat_age_s <= FRESH_S}
                if running <= fresh:
                    return time.monotonic() - since
                await asyncio.sleep(0.1)
        finally:
            await registry.close()
        raise ServerError(
            f"nodes did not heartbeat on the new Redis primary in {SETTLE_TIMEOUT_S:g}s"
        )

    async def _poison(self) -> str:
        """Run one slot of the poison job; restart every node it kills (after
        ``RESTART_DELAY_S``) until the job has moved on from that slot, then pause it."""
        assert self._settings is not None
        killed: list[str] = []
        died: dict[str, float] = {}
        done = False
        deadline = time.monotonic() + poison.DEADLINE_S
        async with JobStore.open(self._settings, "pulse-chaos") as store:
            await store.resume(poison.JOB)
            slot = (await store.trigger(poison.JOB)).slot_at
            while time.monotonic() < deadline:
                self._restart_poisoned(killed, died)
                for node in self._fleet:
                    if node.node_id in died and time.monotonic() >= died[node.node_id]:
                        del died[node.node_id]
                        await self._fleet.start(node)
                if not died:
                    try:
                        job = await store.get(poison.JOB)
                        done = job.status == JobStatus.IDLE and job.slot_at != slot
                    except PulseError:
                        done = False
                    if done:
                        break
                await asyncio.sleep(0.2)
            await store.pause(poison.JOB)
        outcome = "slot recorded" if done else "slot NOT recorded in time"
        return f"{outcome}; killed {', '.join(killed) or 'none'}, each restarted"

    def _restart_poisoned(self, killed: list[str], died: dict[str, float]) -> None:
        for node in self._fleet:
            code = node.proc.returncode if node.proc is not None else None
            if code == poison.EXIT_CODE and node.node_id not in died:
                killed.append(node.node_id)
                died[node.node_id] = time.monotonic() + poison.RESTART_DELAY_S
