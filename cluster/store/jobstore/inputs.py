"""Runs with inputs: ``pulse jobs trigger --payload``, ``--merge-payload`` and ``--slot``.

A trigger with a payload queues one flight stamped with the current time (origin
``trigger``) that carries its payload, so the job's row, its schedule and its claim stay
as they are; a rerun of a past slot is a one-slot backfill request of origin ``rerun``,
queued and run by the backfill machinery (``cluster.store.housekeeping.backfills``). Both run as
flights: leases, retries, recovery and fencing are theirs. Every payload is checked against
the job's ``payload_schema`` here, before anything is written. Why so:
docs/design/inputs.md. A part of ``JobStore``, on its scoped connection.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from functools import partial
from typing import Any

from psycopg.types.json import Jsonb

from cluster.errors import Conflict, InvalidInput
from cluster.jobs.budgets import off_loop
from cluster.jobs.fields import DEFAULT_TENANT, parse_payload
from cluster.jobs.models import Job, JobStatus, iso
from cluster.jobs.payloads import check_payload, merge_payload
from cluster.store.jobstore.scoped import ScopedConnection
from cluster.timing.instants import US

# Triggered runs with a payload that may wait for a node at once, per job: a write token
# cannot queue an unbounded number (docs/security.md).
MAX_WAITING = 10


@dataclass(frozen=True)
class Triggered:
    """What a trigger with input queued: the slot, why it runs, and with what."""

    job: str
    tenant: str
    slot: datetime
    origin: str  # trigger | rerun
    payload: dict[str, Any] | None  # None: the job's own
    backfill_id: int | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "job": self.job,
            "tenant": self.tenant,
            "slot": iso(self.slot),
            "origin": self.origin,
            "payload": self.payload,
            "backfill_id": self.backfill_id,
        }


def chosen_payload(
    job: Job,
    payload: str | Mapping[str, Any] | None,
    merge: str | Mapping[str, Any] | None,
) -> dict[str, Any] | None:
    """The payload a trigger runs with, checked against the job's schema; None: the job's."""
    if payload is not None and merge is not None:
        raise InvalidInput("merge_payload", "give either payload or merge_payload, not both")
    if payload is not None:
        given = parse_payload(payload)
        check_payload(job.payload_schema, given)
        return given
    if merge is not None:
        merged = parse_payload(merge_payload(job.payload, parse_payload(merge, "merge_payload")))
        check_payload(job.payload_schema, merged, "merge_payload")
        return merged
    return None


def _one_node_only(
    name: str, payload: object, merge: object, slot: datetime | None
) -> tuple[str, str]:
    """Why a trigger of an every-node job is refused: the field, and one line."""
    if slot is not None:
        field, what = "slot", "a rerun of a past slot"
    elif payload is not None or merge is not None:
        field = "payload" if payload is not None else "merge_payload"
        what = "a trigger with a payload"
    else:
        field, what = "name", "a trigger beside its held slot (upstreams, skip-next records)"
    return field, f"{name!r} runs on every node: {what} would run on one node only"


class Inputs:
    def __init__(self, db: ScopedConnection) -> None:
        self._db = db

    async def trigger(
        self,
        name: str,
        tenant: str = DEFAULT_TENANT,
        *,
        payload: str | Mapping[str, Any] | None = None,
        merge_payload: str | Mapping[str, Any] | None = None,
        slot: datetime | None = None,
        now: datetime | None = None,
    ) -> Triggered:
        """Run the job now with ``payload`` (or its own with ``merge_payload`` merged in, RFC
        7386), or run its past ``slot`` again (origin ``rerun``). ``InvalidInput`` (nothing
        written) for a payload its schema refuses, both payload forms, a future slot or one
        not on its schedule; ``Conflict`` when that slot is running or queued already, or
        the job has not passed it yet (its own slot, due, held or deferred, or one behind
        it: the job runs or records it, and a rerun beside would run it twice)."""
        if slot is not None and (not isinstance(slot, datetime) or slot.tzinfo is None):
            raise InvalidInput("slot", "needs a UTC offset (ISO 8601)")
        async with self._db.transaction():
            job = await self._db.job("lock_job", name, tenant)
            if job.each_zone:  # its slots run as its children's, one per zone
                raise InvalidInput("name", f"{name!r} runs one child job per zone: trigger one")
            if job.each_node:  # these run as one flight, on one node (docs/design/each-node.md)
                raise InvalidInput(*_one_node_only(name, payload, merge_payload, slot))
            # off the event loop: a schema may take a while (under pulse web's budget)
            chosen = await off_loop(partial(chosen_payload, job, payload, merge_payload))
            stored = None if chosen is None else Jsonb(chosen)
            if slot is None:
                params = {"job_id": job.id, "payload": stored, "now": now, "most": MAX_WAITING}
                row = await self._db.one("trigger_flight", params)
                if row is None:
                    raise Conflict(
                        "name",
                        f"{name!r} has {MAX_WAITING} triggered runs waiting already, or one "
                        "was triggered this very moment",
                    )
                await self._db.notify(job.shard)
                return Triggered(job.name, job.tenant, row["slot"], "trigger", chosen)
            await self._check_rerun(job, slot, now)
            made = await self._db.one(
                "backfill_insert",
                {
                    "job_id": job.id,
                    "tenant_id": job.tenant,
                    "job_name": job.name,
                    "shard_id": job.shard,
                    "range_from": slot,
                    "range_to": slot + US,
                    "only_missing": False,
                    "max_parallel": 1,
                    "slots_total": 1,
                    "origin": "rerun",
                    "payload": stored,
                    "now": now,
                },
            )
            assert made is not None
            await self._db.notify(job.shard)
        return Triggered(job.name, job.tenant, slot, "rerun", chosen, made["id"])

    async def _check_rerun(self, job: Job, slot: datetime, now: datetime | None) -> None:
        if job.paused or job.status == JobStatus.DONE:
            state = "paused" if job.paused else "done"
            raise InvalidInput("slot", f"{job.name!r} is {state}; a rerun needs an active job")
        db_now = await self._db.db_now(now)
        if slot > db_now:
            raise InvalidInput(
                "slot", f"{slot.isoformat()} is in the future; a rerun is of a past slot"
            )
        if job.parsed_schedule().slots_between(slot, slot, 1) != [slot]:
            raise InvalidInput("slot", f"{slot.isoformat()} is not a slot of the job's schedule")
        if job.status == JobStatus.RUNNING and job.slot_at == slot:
            raise Conflict("slot", f"slot {slot.isoformat()} of {job.name!r} is running now")
        if slot >= job.slot_at:  # its own slot (due, held, deferred) or one behind it
            raise Conflict(
                "slot",
                f"slot {slot.isoformat()} of {job.name!r} has not been run or passed by the "
                f"job yet (its slot is {job.slot_at.isoformat()}): a rerun is of a slot "
                "the job has passed",
            )
        found = await self._db.one("rerun_asked", {"job_id": job.id, "slot": slot})
        if found is not None:
            raise Conflict(
                "slot", f"slot {slot.isoformat()} of {job.name!r} is {found['status']} already"
            )
