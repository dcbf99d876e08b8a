"""The heartbeat: renews this node in the Redis member registry and learns who is live.

Redis trouble changes nothing the node holds: the last known member list stays in force
(so no rebalance happens) until Redis answers again, and the node re-registers by itself.
Join/leave messages trigger an immediate heartbeat, so changes are seen at once.

Each beat also reports how long this node's lock session has gone without an answer from
Postgres, once that is longer than an ordinary statement, and learns the peers' reports: a
peer's report wakes the shard keeper, which may end that peer's stalled session
(node/membership/liveness.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from dataclasses import replace

from cluster.errors import MembershipError
from cluster.members import MemberInfo, MemberRegistry
from node.service import Failures
from node.state import NodeState
from node.stats import Stats

logger = logging.getLogger(__name__)

# A lock session waiting less than this is running an ordinary statement: not reported.
REPORT_UNANSWERED_S = 1.0


class Heartbeat:
    def __init__(
        self,
        registry: MemberRegistry,
        info: MemberInfo,
        state: NodeState,
        stats: Stats,
        *,
        ttl_s: float,
        unanswered: Callable[[], float] | None = None,
    ) -> None:
        self._unanswered = unanswered
        self._registry = registry
        self._info = info
        self._state = state
        self._stats = stats
        self._ttl_s = ttl_s

    async def run_once(self) -> None:
        try:
            if self._info.fenced_writes != self._stats.fenced_writes:
                self._info = replace(self._info, fenced_writes=self._stats.fenced_writes)
            waited = self._unanswered() if self._unanswered is not None else 0.0
            waited = waited if waited >= REPORT_UNANSWERED_S else 0.0
            beat = await self._registry.beat(self._info, self._ttl_s, unanswered_s=waited)
        except MembershipError:
            self._stats.redis_errors += 1
            raise
        now = time.monotonic()
        state = self._state
        state.beats = {member: now - age for member, age in beat.ages.items()}
        state.beats_read = now
        state.unanswered = {m: s for m, s in beat.unanswered.items() if m != state.node_id}
        if state.unanswered:
            state.rebalance.set()  # the keeper judges them now, not at its next beat
        live = sorted(beat.ages)
        before = self._state.live
        changed = self._state.set_live(live)
        if any(m not in self._state.member_zones for m in live) or changed:
            await self._learn_zones(live)
        if changed:
            self._stats.membership_changes += 1
            logger.info(
                "members: %s (was %s)",
                ", ".join(live) or "-",
                ", ".join(before) or "-",
                extra={"event": "membership_changed", "members": len(live)},
            )

    async def _learn_zones(self, live: list[str]) -> None:
        """Each live member's zone, for the zone spaces' rings (docs/design/zones.md).

        Read only when the member list changed or a member's zone is not known yet."""
        members = await self._registry.live(self._ttl_s)
        zones = {m.info.node_id: m.info.zone for m in members if m.info.zone != "?"}
        zones[self._info.node_id] = self._info.zone
        known = {m: zones[m] for m in live if m in zones}
        if known != self._state.member_zones:
            self._state.member_zones = known
            self._state.rebalance.set()

    async def watch(self, stop: asyncio.Event) -> None:
        """Follow join/leave messages; each one triggers a heartbeat right away."""
        failures = Failures("membership subscription")

        async def on_change(message: str) -> None:
            logger.debug("membership message %s", message)
            self._state.membership.set()

        while not stop.is_set():
            try:
                await self._registry.watch(on_change, stop, self._info.node_id)
                failures.succeeded()
            except MembershipError as exc:
                failures.failed(exc)
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), failures.backoff_s(0.5, 5.0))
