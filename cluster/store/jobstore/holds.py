"""Holding a job back without pausing it for good: ``pause --until`` (idle again with its
first slot at or after a time, so it resumes by itself with nothing to wake it) and
``skip-next`` (its next slots recorded skipped). Both plan in Python with the job's own
schedule and calendar, then write the job and its skipped records in one transaction.
The records go through ``record_skipped``, a function that runs as the schema's owner, so
a pause or skip-next over the API writes them too (the web's role writes no runs:
docs/design/roles.md). A part of ``JobStore``.

A pause of either kind (``pulse jobs pause`` too) first records skipped the slots a job owes
(one due that no node took yet, held at its gate or deferred by a window, and those that
came behind it): it moves past them, and no slot may be left without a record
(``record_owed``).

``skip-next`` writes its records ahead of the slots, so a job may later be planned back
before them (a resume, a ``pause --until``): ``first_open_run`` passes every slot that has
a record already, and the runs between slots recorded skipped (recorded too), so a skipped
slot is never run and its record never overwritten (the slot ledger, docs/guarantees.md;
tests/integration/test_holds.py).

On an each-zone job each acts on its children, in the same transaction: they run its slots
(``children_of``; an apply moves them in ``cluster.store.jobstore.children``).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from cluster.errors import Conflict, InvalidInput
from cluster.jobs.models import Job, JobStatus, RunStatus
from cluster.store.jobstore.dropped import declare_late, passed_slots, skips_json
from cluster.store.jobstore.scoped import ScopedConnection
from cluster.timing.calendared import CalendarRule, Decision, jittered_start
from cluster.timing.fate import skipped_between
from cluster.timing.instants import US
from cluster.timing.runs import current_run, first_run, origin_of, run_after
from cluster.timing.schedule import ENDED, Schedule

__all__ = ["MAX_SKIP", "Holds", "open_run"]

MAX_SKIP = 1000
SKIP_REASON = "skipped by pulse jobs skip-next"
BETWEEN_REASON = (
    "skipped by pulse jobs skip-next: between slots it recorded skipped, under the job's new timing"
)


class Holds:
    def __init__(self, db: ScopedConnection) -> None:
        self._db = db

    async def pause_until(
        self, name: str, tenant: str, until: datetime, *, note: str | None = None,
        now: datetime | None = None,
    ) -> None:  # fmt: skip
        """The job idles until its first slot at or after ``until``, then runs as usual; an
        each-zone job's children each do."""
        async with self._db.transaction():
            job = await self._db.job("lock_job", name, tenant)
            db_now = await self._db.db_now(now)
            if until.tzinfo is None or until <= db_now:
                raise InvalidInput("until", f"{until.isoformat()} is not in the future")
            self._recurring(job, "pause --until")
            await self.refuse_child(job, "pause --until")
            for held in [job, *await self.children_of(job)]:
                await self.record_owed(held, "pause --until", db_now)
                if held.each_zone:  # its children run its slots: it stays never due
                    start, slot = ENDED, held.slot_at
                else:
                    run = await self.first_open_run(held, until - US, db_now)
                    start = jittered_start(run, held.tenant, held.name, held.jitter_s)
                    slot = run.slot
                params = {"until": until, "note": note, "next_run_at": start, "slot_at": slot}
                await self._write("pause_job_until", held, params)

    async def skip_next(
        self, name: str, tenant: str, count: int = 1, *, now: datetime | None = None
    ) -> list[datetime]:
        """Record the job's next ``count`` runs skipped (an each-zone job's: each of its
        children's); returns their slots."""
        if isinstance(count, bool) or not isinstance(count, int) or not 1 <= count <= MAX_SKIP:
            raise InvalidInput("count", f"must be a whole number from 1 to {MAX_SKIP}")
        async with self._db.transaction():
            job = await self._db.job("lock_job", name, tenant)
            self._recurring(job, "skip-next")
            held = await self.children_of(job) if job.each_zone else [job]
            if not held:
                raise Conflict("name", f"{job.name!r} has no child yet: no node of its zones is up")
            skipped: set[datetime] = set()
            for one in held:
                skipped.update(await self._skip_next(one, count, now))
        return sorted(skipped)

    async def _skip_next(self, job: Job, count: int, now: datetime | None) -> list[datetime]:
        """``skip_next`` of one job that runs its own slots. A slot kept under a new timing
        (deferred, held) walks on to the new timing's slots after the change only
        (``walked_schedule``), as its claim would."""
        if job.status != JobStatus.IDLE:
            raise Conflict("name", f"{job.name!r} is {job.status}; skip-next needs it idle")
        if job.watch:  # its slots no ping came for in time are missed, not the next ones
            job = await declare_late(self._db, job, await self._db.db_now(now))
        schedule, rule = job.walked_schedule(), job.rule()
        run = current_run(schedule, rule, job.slot_at)
        skipped = [(run.slot, SKIP_REASON)]
        calendar: list[tuple[datetime, str]] = []
        for position in range(count):
            run, passed = run_after(schedule, rule, run)
            calendar += [(d.slot, d.reason or "skipped by the calendar") for d in passed]
            if position < count - 1:
                skipped.append((run.slot, SKIP_REASON))
        skips = {"id": job.id, "skips": _json([*skipped, *calendar]), "now": now}
        await self._db.all("record_skips", skips)  # before the job moves past them
        params = {
            "next_run_at": jittered_start(run, job.tenant, job.name, job.jitter_s),
            "slot_at": run.slot,
            "slot_origin": origin_of(run),
        }
        await self._write("skip_next_slots", job, params)
        return [slot for slot, _ in skipped]

    async def refuse_child(self, job: Job, what: str) -> None:
        """``InvalidInput`` if ``job`` is an each-zone job's child: its parent's definition
        holds it (``upsert_zone_child``), so a pause of its own would be undone by the
        parent's next apply, and ``pulse audit``, which judges a child by its parent's
        revisions, would call the slots it held missing. ``what``: the action refused."""
        if len(job.zones) != 1 or "@" not in job.name:  # a child: name@zone, in its zone
            return
        parent = await self._db.one("parent_of", {"id": job.id})
        if parent is not None:
            raise InvalidInput(
                "name",
                f"{job.name!r} is a child of the each-zone job {parent['name']!r}: "
                f"{what} {parent['name']!r}, and each of its children follows",
            )

    async def children_of(self, job: Job) -> list[Job]:
        """The children of ``job``, locked until the transaction ends; none unless it is an
        each-zone job."""
        if not job.each_zone:
            return []
        return [Job.from_row(row) for row in await self._db.all("lock_children", {"ids": [job.id]})]

    async def record_owed(self, job: Job, by: str, now: datetime) -> None:
        """Record skipped the slots an idle job owes at ``now``: its slot, if its time has
        come (due and not yet claimed, held at its gate, deferred by a window, jittered),
        and those that came behind it (``dropped.passed_slots``); a watch job's awaited
        slots no ping came for, those past its ``late_after_s`` declared missed first
        (``dropped.declare_late``). A pause moves the job past them, and the slot ledger
        leaves no slot without a record. Written through ``record_skipped``, as the
        schema's owner: the web's role writes no runs (docs/design/roles.md)."""
        if job.status != JobStatus.IDLE or job.slot_at > now or job.each_zone:
            return  # an each-zone job's children run its slots: they owe them
        schedule = job.parsed_schedule()
        if schedule.chain or schedule.at is not None:  # a queue, or its one slot: kept
            return
        job = await declare_late(self._db, job, now)  # a watch job's missed pings
        owed = passed_slots(job, now, f"skipped by pulse jobs {by}: paused before it ran")
        params = {"id": job.id, "skips": skips_json(owed), "now": now}
        await self._db.all("record_skips", params)

    async def records_ahead(self, job: Job, now: datetime | None = None) -> bool:
        """Whether the idle job's coming slot lies past slots recorded already (skip-next):
        a plain trigger then runs as a flight stamped with the current time and leaves the
        job's slot as it is, for the run after the triggered one is never planned onto a
        recorded slot (test_a_triggered_run_never_runs_a_slot_skip_next_recorded)."""
        if job.status != JobStatus.IDLE:
            return False
        db_now = await self._db.db_now(now)
        if job.slot_at <= db_now:
            return False
        params = {"job_id": job.id, "from": db_now, "limit": 1}
        recorded = await self._db.all("recorded_slots", params)
        return bool(recorded) and recorded[0]["scheduled_for"] < job.slot_at

    async def first_open_run(self, job: Job, after: datetime, now: datetime) -> Decision:
        """The job's first run starting after ``after`` past the slots that have a record
        already (``open_run``). The slots its calendar or windows skip from ``after`` to it
        are recorded skipped: no completion passes them (a window added while the job was
        paused: test_a_resume_records_the_slots_a_window_skips_before_the_jobs_next_run)."""
        schedule, rule = job.parsed_schedule(), job.rule()
        first = first_run(schedule, rule, after)
        passed = [(p.slot, p.reason) for p in skipped_between(schedule, rule, after, first.slot)]
        if passed:
            await self._db.all("record_skips", {"id": job.id, "skips": _json(passed), "now": now})
        return await open_run(self._db, job.id, schedule, rule, first, now)

    def _recurring(self, job: Job, what: str) -> Schedule:
        schedule = job.parsed_schedule()
        if schedule.at is not None:
            raise InvalidInput("name", f"{job.name!r} is a one-off job: {what} does not apply")
        if schedule.chain:
            raise InvalidInput("name", f"{job.name!r} is chained (@after:): {what} does not apply")
        return schedule

    async def _write(self, statement: str, job: Job, params: dict[str, Any]) -> None:
        row = await self._db.one(statement, {"tenant_id": job.tenant, "name": job.name, **params})
        if row is None and job.status == JobStatus.DONE:
            raise Conflict("name", f"{job.name!r} is done: it has no slot left to hold")
        if row is None:
            raise Conflict("name", f"{job.name!r} is running now; try again when it ends")
        await self._db.notify(row["shard_id"])


async def open_run(
    db: ScopedConnection,
    job_id: Any,
    schedule: Schedule,
    rule: CalendarRule | None,
    run: Decision,
    now: datetime | None,
) -> Decision:
    """``run``, or the first run after it whose slot has no record and that comes after
    every slot recorded skipped ahead (skip-next writes them ahead of time): a job planned
    again (resume, ``pause --until``, a new definition, a window) never lands on a slot
    skip-next recorded, nor does any run after it. The runs it passes between those records
    (a new timing may have more slots than the one skip-next walked) are recorded skipped,
    saying so (test_a_new_timing_runs_no_slot_skip_next_recorded_after_its_first)."""
    if schedule.at is not None:  # a one-off's slot is its own, recorded or not
        return run
    passed: list[tuple[datetime, str]] = []
    while True:
        params = {"job_id": job_id, "from": run.slot, "limit": MAX_SKIP}
        rows = await db.all("recorded_slots", params)
        recorded = {r["scheduled_for"] for r in rows}
        skips = [r for r in rows if r["status"] == RunStatus.SKIPPED]
        last = skips[-1]["scheduled_for"] if skips else None  # runs before it are passed too
        while run.slot in recorded or (last is not None and run.slot < last):
            if run.slot not in recorded:
                passed.append((run.slot, _between(skips[-1])))
            run, skipped = run_after(schedule, rule, run)
            passed += [(d.slot, d.reason or "skipped by the calendar") for d in skipped]
        if len(rows) < MAX_SKIP or run.slot <= max(recorded):
            break
    passed = [(slot, why) for slot, why in passed if slot < run.slot]
    if passed:
        await db.all("record_skips", {"id": job_id, "skips": _json(passed), "now": now})
    return run


def _between(later: Mapping[str, Any]) -> str:
    """Why a slot before ``later`` (the newest slot recorded skipped ahead) is passed: the
    job's slots run in order, and one after it is decided already."""
    why = str(later["last_error"] or "")
    if why.startswith(SKIP_REASON):
        return BETWEEN_REASON
    slot = later["scheduled_for"].isoformat()
    return f"skipped: the job was planned again past {slot}, recorded before it ran ({why})"


def _json(pairs: list[tuple[datetime, str]]) -> str:
    return json.dumps([[slot.isoformat(), reason] for slot, reason in pairs])
