"""Recovery: takes back the slots of dead owners and expired leases in held shards.

It runs on every shard this node gains (before claiming there) and periodically over all
held shards. The reset is a compare-and-set in SQL on (running, lease token), so a run that
just finished is never overwritten; its slot becomes due again as the next attempt.
"""

from __future__ import annotations

import logging
from typing import Any

from cluster.store.session import LockSession
from node.state import NodeState
from node.stats import Stats

logger = logging.getLogger(__name__)


class Recovery:
    def __init__(self, state: NodeState, session: LockSession, stats: Stats) -> None:
        self._state = state
        self._session = session
        self._stats = stats

    async def recover(self, shards: frozenset[int]) -> int:
        """Take back the runs in ``shards`` of owners the shard keeper no longer counts
        as alive, and of expired leases."""
        alive = self._state.alive or (self._state.node_id,)
        return self._took_back(await self._session.recover(shards, alive))

    async def recover_own(self) -> int:
        """Runs left by an earlier process of this node id (killed, restarted under the
        same id) look alive to everyone's recovery; take them back before claiming."""
        return self._took_back(await self._session.recover_own())

    def _took_back(self, rows: list[dict[str, Any]]) -> int:
        for row in rows:
            logger.warning(
                "recovered slot from %s (%s); attempt %d is due now",
                row["locked_by"],
                row["reason"],
                row["attempt"],
                extra={
                    "event": "run_recovered",
                    "job": row["name"],
                    "tenant": row["tenant_id"],
                    "slot": row["slot_at"].isoformat(),
                    "attempt": row["attempt"],
                },
            )
        if rows:
            self._stats.recovered += len(rows)
            self._state.wake.set()
        return len(rows)

    async def run_once(self) -> None:
        if self._state.held and self._session.connected:
            await self.recover(self._state.held)
