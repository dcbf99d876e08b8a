"""The backfiller: queues the next slots of the backfill requests of this node's held
shards as flights, every ``BACKFILL_POLL_S``, off the claim path.

A request is a row with a cursor (``cluster.store.housekeeping.backfills``); each pass locks the
active requests of the held shards, queues up to ``max_parallel`` minus those in flight of each,
oldest first, and moves their cursors, in one transaction. The claim loop then runs the flights
(``Claimer.flights_queued``). A node that dies mid-pass leaves the cursor where the last commit put
it; the next holder of the shard carries on. Why so: docs/design/time.md.

Most nodes have no backfill most of the time: after a pass that found no active request in
its held shards, a node asks again only when its held shards change, when a write to one of
them is NOTIFYed (a new request is), or ``IDLE_POLL_S`` later, so an idle node pays one
statement every ``IDLE_POLL_S`` rather than every second.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from datetime import datetime

from cluster.errors import StoreError
from cluster.store.housekeeping.backfills import fill_held
from cluster.store.side import SideConnection
from node.state import NodeState
from node.stats import Stats

logger = logging.getLogger(__name__)

BACKFILL_POLL_S = 1.0
# Between passes while the held shards have no active backfill (see the module docstring).
IDLE_POLL_S = 10.0


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
        # The held shards a pass found no active backfill in, and when (monotonic).
        self._idle: tuple[frozenset[int], float] | None = None

    async def poll(self, clock: float | None = None) -> None:
        """The service's pass on each beat (``node.runtime``): ``run_once``, unless the last
        pass found no active backfill, the held shards are the same, no write to them was
        NOTIFYed since (``shard_written``) and ``IDLE_POLL_S`` has not passed (``clock``:
        ``time.monotonic()`` unless given)."""
        clock = time.monotonic() if clock is None else clock
        held, idle = self._state.held, self._idle
        written = self._state.shard_written.is_set()
        if idle is not None and not written and idle[0] == held and clock < idle[1] + IDLE_POLL_S:
            return
        self._state.shard_written.clear()
        queued = await self.run_once()
        self._idle = (held, clock) if queued is None else None

    async def run_once(self, now: datetime | None = None) -> int | None:
        """One pass over the shards held now; returns the slots queued, or None when they
        have no active backfill."""
        try:
            queued = await fill_held(self._connection, self._state.held, now)
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
