"""Lease renewal: extends the leases of every in-flight run in one statement.

A run longer than its lease is therefore never taken from a live node. A lease that no
longer matches (the slot was recovered elsewhere) cancels the local run: its result would
be fenced anyway, and stopping it early limits the double work. A run someone asked to
cancel is stopped here if the NOTIFY that asked was missed.
"""

from __future__ import annotations

import logging
from datetime import datetime
from uuid import UUID

from cluster.store.lock.session import LockSession
from node.pipeline.completer import job_extra
from node.pipeline.executor import Executor
from node.stats import Stats

logger = logging.getLogger(__name__)


class Renewer:
    def __init__(
        self, session: LockSession, executor: Executor, stats: Stats, *, lease_s: float
    ) -> None:
        self._session = session
        self._executor = executor
        self._stats = stats
        self._lease_s = lease_s

    async def run_once(self) -> None:
        leases = self._executor.leases()
        flights = self._executor.flight_leases()
        if leases:
            kept = await self._session.renew(leases, self._lease_s)
            for job_id, token in leases:
                self._follow(job_id, token, None, job_id in kept, kept.get(job_id))
        if flights:
            held = await self._session.flights.renew(flights, self._lease_s)
            for job_id, slot, token in flights:
                key = (job_id, slot)
                self._follow(job_id, token, slot, key in held, held.get(key))

    def _follow(
        self, job_id: UUID, token: int, slot: datetime | None, kept: bool, cancel_by: str | None
    ) -> None:
        """Stop the run whose lease is gone; pass on a request to cancel one still held."""
        if kept:
            if cancel_by is not None:
                self._executor.stop(job_id, token, cancel_by, slot)
            return
        job = self._executor.cancel(job_id, token, slot)
        if job is not None:
            self._stats.leases_lost += 1
            logger.warning("lease lost; run cancelled", extra=job_extra(job, "lease_lost"))
