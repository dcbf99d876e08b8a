"""The late pass: every node, every few seconds, marks the slots of ALL shards that were
not started within their job's ``late_after_s`` and raises a ``late`` alert for each.

It reads the database rather than this node's own claims, so a slot is reported late even
when the node that owns its shard is dead, as long as any node lives; ``late_slot`` on the
job row makes it once per slot however many nodes run the pass at the same time. A slot
that did start, but late, is reported by the completion of that attempt (the ``complete``
statement), so one claimed late and finished between two passes is not missed
(tests/integration/test_late.py).

Watch jobs (never claimed: their runs come from pings) are read in their own shard by the
same pass: an awaited slot no ping came for within ``late_after_s`` is recorded failed and
raises ``late`` once, and the job awaits its next slot (cluster/store/watches.py,
tests/integration/test_watch.py).
"""

from __future__ import annotations

import logging

from cluster.store.alerts import AlertStore
from node.stats import Stats

logger = logging.getLogger(__name__)

INTERVAL_S = 5.0


class LatePass:
    def __init__(self, store: AlertStore, shards: int, stats: Stats) -> None:
        self._store = store
        self._shards = shards
        self._stats = stats

    async def run_once(self) -> None:
        for row in await self._store.late_pass(self._shards):
            self._stats.late_slots += 1
            logger.warning(
                "slot not started %.0fs after it was due",
                row["late_s"],
                extra={
                    "event": "slot_late",
                    "job": row["name"],
                    "tenant": row["tenant_id"],
                    "slot": row["slot_at"].isoformat(),
                },
            )
        for job in await self._store.watch_pass(self._shards):
            self._stats.late_slots += 1
            logger.warning(
                "no ping for a watched slot within %.0fs",
                job.late_after_s,
                extra={
                    "event": "ping_missing",
                    "job": job.name,
                    "tenant": job.tenant,
                    "slot": job.slot_at.isoformat(),
                },
            )
