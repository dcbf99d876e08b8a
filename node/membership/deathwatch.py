"""The death watch: wakes the shard keeper the moment a peer's lock session ends.

Each node waits on the life lock (``cluster.store.lock.lifelock``) of one peer: its successor
in a cyclic order of the members that alternates zones (``watch_order``), so every member
is watched by exactly one other and, where the zones allow it, from another zone: a zone
that goes down does not take the watchers of its nodes with it. The grant means the
peer's session ended; the shard keeper runs at once and judges every member, not only the
watched one (node/membership/liveness.py), so one surviving watcher is enough for a whole
zone. A death nobody watched is still seen at the keeper's next beat.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Mapping, Sequence

from cluster.store.lock.lifelock import LifeWatch
from node.state import NodeState

logger = logging.getLogger(__name__)

# How long one wait lasts before the target is looked at again (a membership change may
# have given this node another one; meanwhile the keeper covers a newcomer: a dead node's
# heartbeat goes stale, docs/design/beat.md). Each wait is a transaction.
WAIT_S = 10.0
# After a grant, the same peer is not watched again before this: a peer without a life
# lock (reconnecting, an older release, or a namesake holds it) grants every wait at once.
AFTER_GRANT_S = 0.5


def watch_order(members: Sequence[str], zones: Mapping[str, str]) -> list[str]:
    """``members`` in turn from each zone, the largest zones first: neighbours in this
    cyclic order are in different zones wherever the zones' sizes allow it."""
    by_zone: dict[str, list[str]] = defaultdict(list)
    for member in sorted(set(members)):
        by_zone[zones.get(member, "")].append(member)
    groups = sorted(by_zone.values(), key=lambda g: (-len(g), g[0]))
    depth = max((len(g) for g in groups), default=0)
    return [g[i] for i in range(depth) for g in groups if i < len(g)]


def watched(members: Sequence[str], zones: Mapping[str, str], node_id: str) -> str | None:
    """The member ``node_id`` watches: its successor in ``watch_order``."""
    order = watch_order([*members, node_id], zones)
    if len(order) < 2:
        return None
    return order[(order.index(node_id) + 1) % len(order)]


class DeathWatch:
    def __init__(self, state: NodeState, watch: LifeWatch, *, wait_s: float = WAIT_S) -> None:
        self._state = state
        self._watch = watch
        self._wait_s = wait_s

    async def run_once(self) -> float | None:
        """One wait on the watched peer; the delay before the next (None: the next beat)."""
        state = self._state
        zones = {**state.member_zones, state.node_id: state.zone}
        peer = watched(state.live, zones, state.node_id)
        if peer is None:
            return None
        if not await self._watch.wait_gone(peer, self._wait_s):
            return 0.0
        logger.info(
            "lock session of %s ended", peer, extra={"event": "peer_session_ended", "member": peer}
        )
        state.suspect = True
        state.rebalance.set()
        return AFTER_GRANT_S

    async def close(self) -> None:
        await self._watch.close()
