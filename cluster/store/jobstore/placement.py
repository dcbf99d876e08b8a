"""Where a job's row goes once ``Definitions`` wrote it: the shard of its zone set, back to
the default shards, parked as an each-zone parent (docs/design/zones.md), or, a new watch
job, the watch shard. A part of ``Definitions``, on its scoped connection: statements of
their own after the upsert, in the same transaction, so nobody sees a job in the wrong
shard."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from cluster.jobs.spec import JobSpec
from cluster.store.connect import Row
from cluster.store.housekeeping import watches
from cluster.store.jobstore.scoped import ScopedConnection
from ring import shard_for
from ring.zones import PARKED_SHARD, WATCH_SHARD, ZONE_SHARD_BASE, zone_shard_for


class Placement:
    def __init__(self, db: ScopedConnection) -> None:
        self._db = db

    async def place(
        self,
        spec: JobSpec,
        shards: int,
        params: Mapping[str, Any],
        job: Row,
        now: datetime,
        *,
        inserted: bool,
    ) -> int | None:
        """Move the job to the shard of its zone set, back to the default shards, or park
        it as an each-zone parent; a new watch job to the watch shard.

        Returns the new shard if the job moved, None if it was already in place. ``job``:
        its row as the upsert left it; ``params``: what the upsert was given (a parent made
        an ordinary job again is due at its slot, ``slot_at``, from ``next_run_at``);
        ``now``: the writer's clock. Separate statements from ``upsert_jobs``, in the same
        transaction: nobody sees the job in the wrong shard."""
        if spec.watch or job["watch"]:  # never zoned (JobSpec): the watch shard or nothing
            placed = await watches.place(self._db.all, spec.watch, job, inserted)
            return WATCH_SHARD if placed else None
        key = {"tenant_id": spec.tenant, "name": spec.name}
        zones = list(spec.zones) or None
        if spec.each_zone:
            parked = {**key, "zones": zones, "shard_id": PARKED_SHARD, "now": now}
            return None if await self._db.one("park_each_zone", parked) is None else PARKED_SHARD
        if job.get("each_zone"):
            planned = {"slot_at": params["slot_at"], "next_run_at": params["next_run_at"]}
            await self._db.one("unpark_each_zone", {**key, **planned, "now": now})
        elif tuple(job.get("zones") or ()) == spec.zones and (
            spec.zones or job["shard_id"] < ZONE_SHARD_BASE
        ):
            return None
        if spec.zones:
            space = await self._zone_space(spec.zones)
            shard = zone_shard_for(job["id"], space)
        else:
            shard = shard_for(job["id"], shards)
        moved = await self._db.one("set_job_zones", {**key, "zones": zones, "shard_id": shard})
        return None if moved is None else shard

    async def _zone_space(self, zones: tuple[str, ...]) -> int:
        while True:  # no row: a concurrent first use of the set, committed by now
            found = await self._db.one("zone_space", {"zones": list(zones)})
            if found is not None:
                return int(found["space"])
