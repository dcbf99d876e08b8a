"""The backfiller: queues the next slots of the backfill requests of this node's held
shards as flights, every ``BACKFILL_POLL_S``, off the claim path.

A request is a row with a cursor (``cluster.store.backfills``); each pass locks the active
requests of the held shards, queues up to ``max_parallel`` minus those in flight of each,
oldest first, and moves their cursors, in one transaction. The claim loop then runs the
flights (``Claimer.flights_queued``). A node that dies mid-pass leaves the cursor where the
last commit put it; the next holder of the shard carries on. Why so: docs/design/time.md.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import datetime

from cluster.errors import StoreError
from cluster.store.backfills import fill
from cluster.store.side import SideConnection
from node.state import NodeState
from node.stats import Stats

logger = logging.getLogger(__name__)

BACKFILL_POLL_S = 1.0


class Backfiller:
    def __init__(
        self,
        connection: SideConnection,
        state: NodeState,
        stats: Stats,
        on_queued: Callable[[], None],
    ) -> None:
        self._connection = connection
        self._state = state
        self._stats = stats
        self._on_queued = on_queued

    async def run_once(self, now: datetime | None = None) -> int:
        """One pass over the shards held now; returns the slots queued."""
        try:
            queued = await fill(self._connection, self._state.held, now)
        except StoreError:
            self._stats.db_errors += 1
            raise
        if queued:
            logger.debug(
                "queued %d backfill slots", queued, extra={"event": "backfill_queued", "n": queued}
            )
            self._on_queued()
        return queued

    async def close(self) -> None:
        await self._connection.close()
