"""The gate pass: every node, every few seconds, asks again the gates of the held slots in
its shards (``gate_release``, migration 021).

An upstream's completion releases its downstreams in the statement that writes its run row;
this pass only catches what that could not: a downstream row locked at that instant, an
edge written at the moment its upstream succeeded, an upstream completed by a node of an
older release, or an upstream deleted. So a release is never lost, only delayed by at most
one pass (2 s while a slot of its shards is held, else 10 s; tests/integration/test_gates.py).
"""

from __future__ import annotations

import logging

from cluster.store.side import SideConnection
from node.state import NodeState

logger = logging.getLogger(__name__)

INTERVAL_S = 2.0
# With no slot held in its shards, a node asks this much less often: a cluster without
# dependencies pays one statement per node every 10 s (bench/README.md, steady).
IDLE_INTERVAL_S = 10.0


class GatePass:
    def __init__(self, side: SideConnection, state: NodeState) -> None:
        self._side = side
        self._state = state

    async def run_once(self) -> float:
        """One pass; the delay until the next."""
        if not self._state.held:
            return INTERVAL_S
        rows = await self._side.fetch("gate_pass", {"shards": sorted(self._state.held)})
        released = int(rows[0]["released"]) if rows else 0
        if released:
            logger.info("gate pass released %d slots", released, extra={"event": "gate_pass"})
        return INTERVAL_S if rows and rows[0]["held"] else IDLE_INTERVAL_S

    async def close(self) -> None:
        await self._side.close()
