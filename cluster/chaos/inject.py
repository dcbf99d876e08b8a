"""Carries out a fault plan against the fleet, its proxies and the servers, on time.

Each fault is applied at its planned offset, held, then undone (a killed node is started
again under the same id, a stopped one continued, a proxy restored, a server restarted),
and recorded with the wall-clock times it actually began and ended. The poison job is
triggered and held until Pulse has recorded its slot, every node it killed restarted.
"""

from __future__ import annotations

import asyncio
import logging
import signal
import time
from collections.abc import Awaitable, Callable

from cluster.chaos import poison
from cluster.chaos.fleet import Fleet, NodeProcess
from cluster.chaos.observations import FaultRecord
from cluster.chaos.plan import Fault
from cluster.chaos.servers import PostgresServer, RedisServer
from cluster.errors import PulseError
from cluster.settings import ClusterSettings
from cluster.store.jobs import JobStore

logger = logging.getLogger(__name__)

_Switch = Callable[[NodeProcess], None]
# Faults switched on for every target node, held, then switched off: (on, off, report note).
_SWITCHED: dict[str, tuple[_Switch, _Switch, str]] = {
    "sigstop": (lambda n: n.signal(signal.SIGSTOP), lambda n: n.signal(signal.SIGCONT), "paused"),
    "pg-stall": (lambda n: n.pg.stall(), lambda n: n.pg.restore(), "postgres traffic stalled"),
    "redis-cut": (lambda n: n.redis.cut(), lambda n: n.redis.restore(), "redis traffic cut"),
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
    ) -> None:
        self._fleet = fleet
        self._postgres = postgres
        self._redis = redis
        self._terminate = terminate
        self._settings = settings  # for the poison job
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
            detail = await self.apply(fault)
            self.records.append(
                FaultRecord(
                    kind=fault.kind,
                    label=fault.label,
                    targets=fault.targets,
                    started=started,
                    ended=time.time(),
                    bound_s=fault.bound_s,
                    detail=detail,
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
                        done = job.status == "idle" and job.slot_at != slot
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
