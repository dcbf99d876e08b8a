"""Steering what runs, the part of ``JobStore`` that acts on slots rather than on job
definitions: cancelling running slots (``pulse runs cancel``; docs/design/effects.md) and
backfill requests (``pulse jobs backfill``, ``pulse backfills``; docs/design/time.md).
A part of ``JobStore``, on its scoped connection."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from uuid import UUID

from cluster.errors import InvalidInput, NotRunning
from cluster.jobs.fields import DEFAULT_TENANT, MAX_COUNT, check_text
from cluster.jobs.models import JobStatus
from cluster.store.housekeeping import backfills, watches
from cluster.store.housekeeping.backfills import Backfill, BackfillPlan
from cluster.store.jobstore.scoped import ScopedConnection
from cluster.store.jobstore.specs import MAX_NOTE_LENGTH
from cluster.store.notify import CANCEL_PREFIX
from cluster.store.queries import query


@dataclass(frozen=True)
class CancelRequest:
    """A running slot asked to stop: which, which attempt, and the node running it.
    ``watched``: a watch job's run, recorded cancelled at once (no node runs it).
    ``queued``: an every-node member's run not started yet, recorded cancelled at once
    (docs/design/each-node.md). ``job``: the job whose run it is, an each-zone job's child
    (``name@zone``) when the job asked for is its parent."""

    slot: datetime
    attempt: int
    node_id: str | None
    watched: bool = False
    queued: bool = False
    job: str | None = None


class RunControl:
    def __init__(self, db: ScopedConnection) -> None:
        self._db = db

    async def cancel(
        self,
        name: str,
        tenant: str = DEFAULT_TENANT,
        *,
        by: str,
        slot: datetime | None = None,
        every: bool = False,
    ) -> list[CancelRequest]:
        """Ask the node running the job's slot (``slot``, else whichever runs; with
        ``every``, each slot of an overlap ``allow`` job in flight) to stop it: at once
        through NOTIFY when that node listens, else at its next lease renewal, or by
        recovery if it is gone. The slot is recorded ``cancelled`` (``by`` says who asked)
        and not retried. A watch job's run a ``/start`` opened is recorded cancelled at
        once: Pulse does not run its process, so it cannot stop it. An every-node slot is
        cancelled on each member: running runs are asked to stop, queued ones are recorded
        cancelled without starting, and the slot closes ``cancelled``. An each-zone job's
        slot is cancelled in each child running it. ``NotRunning`` when no such slot is
        running; ``InvalidInput`` when several are and neither ``slot`` nor ``every`` says
        which."""
        by = " ".join(check_text(by, "by").split())[:MAX_NOTE_LENGTH] or "unknown"
        params = {"tenant_id": tenant, "name": name, "slot": slot, "by": by}
        async with self._db.transaction():
            rows = await self._db.all("cancel_job", params)
            rows += await self._db.all("cancel_flights", params)
            members = await self._db.all("cancel_node_runs", {**params, "now": None})
            watched = await watches.cancel_runs(
                self._db.all, name, tenant, scope=self._db.scope, slot=slot, by=by
            )
            # An each-zone job's children run its slot in their zones: one slot, each asked.
            slots = {r["slot_at"] for r in rows} | {m["slot"] for m in members}
            running = len(slots) + len(watched)
            if running > 1 and slot is None and not every:
                raise InvalidInput(
                    "slot", f"{running} slots of {name!r} are running: give --slot or --all"
                )
            for row in rows:  # delivered when the transaction commits
                flight = row["overlap"] == "allow"
                await self._wake(row["id"], row["lease_token"], row["slot_at"], flight, by)
            for m in members:  # an every-node member's run: a flight of its member
                if m["started"]:
                    await self._wake(m["job_id"], m["lease_token"], m["slot"], True, by)
        if not rows and not members and not watched:
            await self._db.job("get_job", name, tenant)  # NotFound when there is no such job
            which = f"slot {slot.isoformat()} of " if slot is not None else ""
            raise NotRunning(f"no {which}job {name!r} in tenant {tenant!r} is running")
        asked = [
            CancelRequest(row["slot_at"], row["attempt"], row["locked_by"], job=row["name"])
            for row in rows
        ]
        asked += [
            CancelRequest(m["slot"], m["attempt"], m["member"], queued=not m["started"])
            for m in members
        ]
        return asked + [CancelRequest(at, 1, None, watched=True) for at in watched]

    async def _wake(self, job_id: UUID, token: int, slot: datetime, flight: bool, by: str) -> None:
        """NOTIFY the node running that lease to stop it now (its renewal would, later)."""
        slot_us = int(slot.timestamp() * 1e6) if flight else ""
        payload = f"{CANCEL_PREFIX}{job_id}:{token}:{slot_us}:{by}"
        await self._db.conn.execute(
            query("notify"), {"channel": self._db.settings.wake_channel, "payload": payload}
        )

    async def backfill(
        self,
        name: str,
        tenant: str = DEFAULT_TENANT,
        *,
        start: datetime,
        end: datetime,
        only_missing: bool = False,
        max_parallel: int = 1,
        dry_run: bool = False,
        now: datetime | None = None,
    ) -> BackfillPlan:
        """Ask for the job's slots in ``[start, end)`` to run again, oldest first, at most
        ``max_parallel`` at once (``only_missing``: those without a succeeded run). With
        ``dry_run``, only the slots it would run. A slot that runs after the request is
        made, by the schedule or another request, is not run again by it (S1). A range
        that reaches the job's slot ends there: that slot and the later ones are the
        schedule's (``BackfillPlan.cut_at``). ``InvalidInput`` for a reversed, empty or too
        large range, one that starts at or after the job's slot, a paused or done job, or an
        each-zone job (its children run its slots); nothing is written then."""
        if isinstance(max_parallel, bool) or not isinstance(max_parallel, int) or max_parallel < 1:
            raise InvalidInput("max_parallel", f"must be a whole number >= 1, got {max_parallel!r}")
        if max_parallel > MAX_COUNT:
            raise InvalidInput("max_parallel", f"must be at most {MAX_COUNT}")
        async with self._db.transaction():
            job = await self._db.job("lock_job", name, tenant)
            if job.each_zone:  # no node claims its row: a request there would wait for ever
                raise InvalidInput("job", f"{name!r} runs one child job per zone: backfill one")
            if job.paused or job.status == JobStatus.DONE:
                state = "paused" if job.paused else "done"
                raise InvalidInput("job", f"{name!r} is {state}; a backfill needs an active job")
            if job.watch:
                raise InvalidInput("job", f"{name!r} is a watch job: no node runs its slots")
            until = backfills.plan_end(start, end, job.slot_at)
            cut_at = job.slot_at if until < end else None
            slots = backfills.plan_slots(job.parsed_schedule(), start, until, cut_at)
            if only_missing:
                ok = await backfills.ran(self._db.all, job.id, slots, only_missing=True)
                slots = [s for s in slots if s not in ok]
            if dry_run:
                return BackfillPlan(slots, cut_at=cut_at)
            if not slots:
                raise InvalidInput("from", "every slot of the range has succeeded already")
            params = {
                "job_id": job.id,
                "tenant_id": job.tenant,
                "job_name": job.name,
                "shard_id": job.shard,
                "range_from": start,
                "range_to": until,
                "only_missing": only_missing,
                "max_parallel": max_parallel,
                "slots_total": len(slots),
                "origin": None,
                "payload": None,
                "now": now,
            }
            made = await self._db.one("backfill_insert", params)
            assert made is not None
            await self._db.notify(job.shard)
        return BackfillPlan(slots, Backfill.from_row(made), cut_at)

    async def backfills(
        self, tenant: str | None = None, limit: int | None = None
    ) -> list[Backfill]:
        """Every backfill request (the newest ``limit``), oldest first, with its progress."""
        params = {"tenant_id": tenant, "limit": limit}
        return [Backfill.from_row(r) for r in await self._db.all("backfill_list", params)]

    async def cancel_backfill(self, backfill_id: int) -> Backfill:
        """Stop a backfill: nothing more is queued, queued slots are dropped, running ones
        finish. ``InvalidInput`` for an unknown id."""
        row = await self._db.one("backfill_cancel", {"id": backfill_id})
        if row is None:
            raise InvalidInput("id", f"no backfill {backfill_id}")
        return Backfill.from_row(row)
