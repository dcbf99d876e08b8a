"""The flights statements of the lock session: claims, renewals, releases and recoveries of
the slots of overlap ``allow`` jobs, each under a lease of its own (migration 009,
docs/design/overlap.md). ``Flights`` is a part of ``LockSession``, run on its connection as
the job statements are; completions and spawns go through the result writer
(``cluster.store.lock.completions``).
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from datetime import datetime
from typing import Any, NamedTuple
from uuid import UUID

from cluster.settings import DEFAULT_LEASE_S
from cluster.store.deadline import Statement
from cluster.store.lock.records import ClaimedJob, claimed_jobs, int_array

_FIELDS = len(ClaimedJob._fields)

FlightLease = tuple[UUID, datetime, int]  # job id, slot, token
FlightKey = tuple[UUID, datetime]


class RecoveredFlight(NamedTuple):
    """A flight taken back from a dead owner: queued again, or (``poison``) handed to the
    caller to record as failed or cancelled."""

    job: ClaimedJob
    poison: bool
    reason: str
    lost_by: str | None


class Flights:
    """``run``: runs a statement on the lock session, within its deadline; ``node_id`` and
    ``zone``: the node's, written into the flights it takes."""

    def __init__(self, run: Statement, node_id: str, zone: str) -> None:
        self._run = run
        self.node_id = node_id
        self.zone = zone

    async def claim(
        self,
        shards: Collection[int],
        limit: int,
        lease_s: float,
        now: datetime | None = None,
        *,
        ahead_s: float = 0.0,
    ) -> list[ClaimedJob]:
        """Queued flights of ``shards`` that are due, and this node's each-node runs due
        within ``ahead_s``, now running under this node."""
        if limit <= 0:  # no shard held: its own each-node runs are still this node's
            return []
        params = {
            "shards": int_array(shards),
            "limit": limit,
            "lease_s": lease_s,
            "node_id": self.node_id,
            "zone": self.zone,
            "now": now,
            "ahead_s": ahead_s,
        }
        return claimed_jobs(await self._run("claim_flights", params), 0)

    async def renew(
        self, leases: Sequence[FlightLease], lease_s: float, now: datetime | None = None
    ) -> dict[FlightKey, str | None]:
        """Extend the flight leases still held; each maps to who asked to cancel it."""
        if not leases:
            return {}
        params = {**_arrays(leases), "lease_s": lease_s, "node_id": self.node_id, "now": now}
        rows = await self._run("renew_flights", params)
        return {(row[0], row[1]): row[2] for row in rows}

    async def release(
        self, leases: Sequence[FlightLease], reason: str, now: datetime | None = None
    ) -> set[FlightKey]:
        if not leases:
            return set()
        params = {**_arrays(leases), "reason": reason, "node_id": self.node_id, "now": now}
        rows = await self._run("release_flights", params)
        return {(row[0], row[1]) for row in rows}

    async def drain(self, now: datetime | None = None) -> list[tuple[UUID, datetime, str | None]]:
        """This node leaving: its each-node runs not ended recorded missed ('drained'); each
        (job id, slot) with the slot's coverage if that closed it."""
        params = {"node_id": self.node_id, "zone": self.zone, "now": now}
        return [(row[0], row[1], row[2]) for row in await self._run("drain_node_runs", params)]

    async def recover(
        self,
        shards: Collection[int],
        live: Sequence[str],
        now: datetime | None = None,
        lease_s: float = DEFAULT_LEASE_S,
        *,
        own: bool = False,
    ) -> list[RecoveredFlight]:
        """Take back the running flights of dead owners and expired leases in ``shards``;
        with ``own``, those an earlier process of this node id left."""
        if not shards and not own:
            return []
        params = {
            "own": own,
            "shards": int_array(shards),
            "live": list(live),
            "node_id": self.node_id,
            "zone": self.zone,
            "lease_s": lease_s,
            "now": now,
        }
        rows = await self._run("recover_flights", params)
        return [
            RecoveredFlight(
                ClaimedJob(*row[:_FIELDS]), row[_FIELDS], row[_FIELDS + 1], row[_FIELDS + 2]
            )
            for row in rows
        ]


def _arrays(leases: Sequence[FlightLease]) -> dict[str, Any]:
    return {
        "ids": [i for i, _, _ in leases],
        "slots": [s for _, s, _ in leases],
        "tokens": [t for _, _, t in leases],
    }
