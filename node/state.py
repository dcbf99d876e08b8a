"""What one node currently believes: live members, desired and held shards, and the
events that wake its loops. Only the event loop touches it, so no locks are needed."""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field

from node.service import Signal

logger = logging.getLogger(__name__)


@dataclass
class NodeState:
    node_id: str
    zone: str
    shard_count: int
    live: tuple[str, ...] = ()  # live in the Redis member registry
    members_known: bool = False
    alive: tuple[str, ...] = ()  # live members whose lock session exists (the shard keeper's)
    beats: dict[str, float] = field(default_factory=dict)  # member -> its last beat, monotonic
    beats_read: float = float("-inf")  # monotonic time ``beats`` was read from Redis
    # Member -> how long its lock session had gone unanswered at its last beat, as it
    # reports it (members that report nothing answer, or run an older release).
    unanswered: dict[str, float] = field(default_factory=dict)
    desired: frozenset[int] = frozenset()
    held: frozenset[int] = frozenset()
    member_zones: dict[str, str] = field(default_factory=dict)  # live member -> its zone
    spaces: dict[int, tuple[str, ...]] = field(default_factory=dict)  # zone space -> zones
    spaces_stale: bool = True  # re-read the zone spaces on the next rebalance
    claiming: bool = True
    reconnect: bool = False
    wake: asyncio.Event = field(default_factory=Signal)
    rebalance: asyncio.Event = field(default_factory=Signal)
    membership: asyncio.Event = field(default_factory=Signal)
    # NOTIFY wake-ups of the services that sleep while they find nothing to do: a queued
    # alert delivery (alert delivery), a write to a held shard (the backfiller).
    alerts: asyncio.Event = field(default_factory=Signal)
    shard_written: asyncio.Event = field(default_factory=Signal)
    # A NOTIFY said each-node runs were queued for the members (docs/design/each-node.md).
    member_runs: asyncio.Event = field(default_factory=Signal)
    # The death watch saw a session end: the shard keeper reads the members' sessions.
    suspect: bool = False
    flights_written: bool = False  # the claim loop's flag of the same NOTIFY (a trigger, say)
    # ... and its flag for the fair claim's tenant list: a job written there may be a new
    # tenant's (cluster/store/lock/tenantlist.py).
    tenants_written: bool = False

    def set_live(self, live: list[str]) -> bool:
        """Record the live member list; True (and wake the shard keeper) if it changed."""
        members = tuple(sorted(live))
        changed = members != self.live or not self.members_known
        self.live = members
        self.members_known = True
        if changed:
            self.rebalance.set()
        return changed

    def members(self) -> list[tuple[str, str | None]]:
        """The live members the ring is built from, with their zones (None: not known yet):
        those an each-node slot claimed now is fanned out to."""
        zones: dict[str, str | None] = {**self.member_zones, self.node_id: self.zone}
        return [(m, zones.get(m)) for m in self.alive or (self.node_id,)]

    def session_untrusted(self) -> int:
        """The lock session may be gone: stop using its shards now and reconnect.

        Returns how many shards were dropped."""
        dropped = len(self.held)
        if self.held:
            logger.warning(
                "lock session lost or unconfirmed; dropping %d shards",
                len(self.held),
                extra={"event": "shards_dropped"},
            )
        self.held = frozenset()
        self.reconnect = True
        self.rebalance.set()
        return dropped
