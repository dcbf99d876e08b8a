"""The pruner: deletes the runs of this node's held shards that passed their retention,
and alert events done with, every prune interval, off the claim path.

It prunes on a side connection of its own (``<node id>/prune``), never the lock session
or the result writer, in short statements of small batches (``cluster.store.housekeeping.pruning``),
so a pass never delays a claim or a completion. A shard that moves during a pass may be pruned by
both nodes for a while: the same rule deletes the same rows. Runs of shards nobody holds wait until
someone holds them. It also refreshes the runs table's size for the metrics, so a scrape never
queries Postgres.
"""

from __future__ import annotations

import logging
from datetime import datetime

from cluster.errors import StoreError
from cluster.store.housekeeping.pruning import prune_held
from cluster.store.side import SideConnection
from node.service import Signal, run_service
from node.state import NodeState
from node.stats import Stats

logger = logging.getLogger(__name__)


class Pruner:
    def __init__(
        self,
        connection: SideConnection,
        state: NodeState,
        stats: Stats,
        *,
        interval_s: float,
    ) -> None:
        self._connection = connection
        self._state = state
        self._stats = stats
        self.interval_s = interval_s

    async def run_once(self, now: datetime | None = None) -> int:
        """One pass over the shards held now; returns the runs removed."""
        try:
            result, size = await prune_held(self._connection, self._state.held, now)
        except StoreError:
            self._stats.db_errors += 1
            raise
        self._stats.runs_pruned += result.runs
        self._stats.runs_table_rows = size.rows
        self._stats.runs_table_bytes = size.bytes
        if result.runs or result.alert_events or result.revisions:
            logger.debug(
                "pruned %d runs, %d alert events and %d job revisions in %d statements",
                result.runs,
                result.alert_events,
                result.revisions,
                result.statements,
                extra={"event": "runs_pruned", "runs": result.runs},
            )
        return result.runs

    async def run(self, stop: Signal) -> None:
        """Prune every interval until ``stop``; then close the connection."""
        try:
            await run_service("pruning", self._pass, interval_s=self.interval_s, stop=stop)
        finally:
            await self.close()

    async def _pass(self) -> None:
        await self.run_once()

    async def close(self) -> None:
        await self._connection.close()
