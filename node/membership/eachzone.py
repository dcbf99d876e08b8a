"""Each-zone jobs: keeps one child job per live zone for every each-zone parent.

A parent (``--each-zone``) never runs itself: it is parked in a shard no node locks. Every
node makes sure the children of its OWN zone exist and match their parent's definition
(a child is an ordinary job named ``<name>@<zone>``, pinned to that zone, so it is claimed
once per slot in that zone and its runs and idempotency key carry the zone). What a child
copies of its parent is declared with the job's options (``child``, cluster/jobs/spec.py):
its jitter too, each child's slots spread by its own name. An operator's action on the
parent (an apply, a pause...) moves its children in its own transaction, with the records
the slot ledger asks (cluster/store/jobstore/children.py): this keeper finds them in line.
Children of zones with no live node, or no longer wanted by their parent, are removed by
any node once it has known every live member's zone for a while. Runs from the shard keeper
every time it re-reads the zone spaces (docs/design/zones.md).
"""

from __future__ import annotations

import logging
import time
import uuid
from datetime import datetime

from cluster.store.lock.session import LockSession
from cluster.store.lock.zones import child_plan
from node.state import NodeState
from ring.zones import zone_shard_for

logger = logging.getLogger(__name__)

# A zone must look empty this long before its children go: a node starting, or a member
# whose info Redis has not given yet, must not make a live zone look dead.
ZONE_GONE_GRACE_S = 10.0


class ZoneChildren:
    def __init__(self, state: NodeState, session: LockSession) -> None:
        self._state = state
        self._session = session
        self._empty_since: dict[str, float] = {}  # zone -> when it was first seen empty
        self.found = True  # the last pass found each-zone parents or children

    async def run_once(self, now: datetime | None = None) -> bool:
        """Create or align this zone's children, remove unwanted ones; True if any changed.
        ``now``: the database's clock unless given (a test's)."""
        self.found = False
        changed = await self._ensure_mine(now)
        return await self._remove_unwanted() or changed

    async def _ensure_mine(self, now: datetime | None) -> bool:
        state = self._state
        every = await self._session.zones.each_zone_parents(state.zone)
        self.found = self.found or bool(every)
        parents = [p for p in every if not p["fresh"]]
        if not parents:
            return False
        space = await self._session.zones.zone_space([state.zone])
        now = now or await self._session.db_now()
        written = False
        for parent in parents:
            child = uuid.uuid4()  # used only if the child is created now
            slot, start = child_plan(parent, state.zone, now, parent["paused_until"])
            if await self._session.zones.upsert_zone_child(
                parent["id"], state.zone, child, zone_shard_for(child, space), slot, start
            ):
                written = True
                logger.info(
                    "each-zone job %s: its child for zone %s is in line",
                    parent["name"],
                    state.zone,
                    extra={"event": "zone_child_written", "job": parent["name"]},
                )
        return written

    async def _remove_unwanted(self) -> bool:
        state = self._state
        children = await self._session.zones.zone_children()
        self.found = self.found or bool(children)
        if not children:
            return False
        # Zones are trusted only when every alive member's zone is known.
        known = all(m in state.member_zones for m in state.alive)
        live_zones = {state.member_zones[m] for m in state.alive if m in state.member_zones}
        live_zones.add(state.zone)
        now = time.monotonic()
        for zone in list(self._empty_since):
            if zone in live_zones:
                del self._empty_since[zone]
        doomed = []
        for child in children:
            zone = child["zone"]
            if not child["wanted"]:
                doomed.append(child["id"])
            elif known and zone not in live_zones:
                since = self._empty_since.setdefault(zone, now)
                if now - since >= ZONE_GONE_GRACE_S:
                    doomed.append(child["id"])
        if not doomed:
            return False
        removed = await self._session.zones.remove_zone_children(doomed)
        for name in removed:
            logger.info(
                "removed %s: its zone has no live node or its parent no longer wants it",
                name,
                extra={"event": "zone_child_removed", "job": name},
            )
        return bool(removed)
