"""The death watch: wakes the shard keeper the moment a peer's lock session ends.

Each node waits on the life lock (``cluster.store.lifelock``) of the member after it in
the sorted member list, so every member is watched by exactly one other while there are
two or more. The grant means the peer's session ended; the shard keeper runs at once and
tells a death (no Redis connection either: evicted, its shards taken now) from a blip
(grace). Without the watch, a death would wait for the keeper's next beat.
"""

from __future__ import annotations

import logging

from cluster.store.lifelock import LifeWatch
from node.state import NodeState

logger = logging.getLogger(__name__)

# How long one wait lasts before the target is looked at again (a membership change may
# have given this node another one; meanwhile the keeper's beat covers a newcomer).
WAIT_S = 5.0
# After a grant, the same peer is not watched again before this: a peer without a life
# lock (an older release, or a namesake holds it) grants every wait at once.
AFTER_GRANT_S = 1.0


def watched(members: tuple[str, ...], node_id: str) -> str | None:
    """The member ``node_id`` watches: the next one after it in sorted order, cyclic."""
    others = sorted(m for m in members if m != node_id)
    if not others:
        return None
    return next((m for m in others if m > node_id), others[0])


class DeathWatch:
    def __init__(self, state: NodeState, watch: LifeWatch, *, wait_s: float = WAIT_S) -> None:
        self._state = state
        self._watch = watch
        self._wait_s = wait_s

    async def run_once(self) -> float | None:
        """One wait on the watched peer; the delay before the next (None: the next beat)."""
        state = self._state
        peer = watched(state.live, state.node_id)
        if peer is None:
            return None
        if not await self._watch.wait_gone(peer, self._wait_s):
            return 0.0
        logger.info(
            "lock session of %s ended", peer, extra={"event": "peer_session_ended", "member": peer}
        )
        state.rebalance.set()
        return AFTER_GRANT_S

    async def close(self) -> None:
        await self._watch.close()
