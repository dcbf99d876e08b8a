"""The slots a new definition moves a job past. ``pulse jobs apply`` (or ``rollback``, an
apply of an older revision) that changes the timing of a job whose slot is overdue (no node
ran it: an outage) moves the job to the new timing's next slot: the old timing's slots due
by then never run. They are recorded skipped, with that reason, in the apply's transaction,
as a pause or a window change records the slots it passes (the slot ledger,
docs/guarantees.md; docs/design/gates.md): from the rows the batch's upsert returns, or,
for a login that writes no past runs, before the upsert moves the jobs. A part of
``Definitions``.

A slot held at its gate or deferred by a window is kept by the new definition instead
(``Replanning.past_records``), and its claim decides it and the new timing's slots after
the change (``Job.walked_schedule``) up to then; the old timing's slots after it that the
new timing does not have, every one up to the change, are recorded here.
A running slot is kept too, and its completion goes on to the slot the new timing planned
(``jobs.timing_slot``): the old timing's slots after it up to the change are recorded here.
A job whose definition changes but not its timing keeps its slot: nothing is recorded.

A pause walks the same way (``passed_slots``): the slots an idle job owes when it is paused
(due, held at its gate, deferred) are recorded skipped before it stops, whether by
``pulse jobs pause`` (``Holds.record_owed``) or by an apply of ``paused: true``; so does an
apply that makes a job an each-zone parent, which never runs again (``record_parked``).

A watch job's awaited slots that no ping came for within its ``late_after_s`` were missed
before any action: the action declares them so first (``declare_late``), and records
skipped only the slots after them.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import replace
from datetime import datetime
from typing import Any

from psycopg.types.json import Jsonb

from cluster.jobs.models import Job, JobStatus
from cluster.store.connect import Row
from cluster.store.jobstore import bulk
from cluster.store.jobstore.scoped import ScopedConnection
from cluster.timing import passing
from cluster.timing.passing import Passing
from cluster.timing.watching import late_slots

# The most late slots of a watch job one action declares missed (``declare_late``): 6.9 days
# of a minutely job, ten calls of ``watch_declare_missed``.
MAX_DECLARED = 10 * passing.MAX_RECORDED

__all__ = [
    "declare_late",
    "dropped_slots",
    "overdue",
    "owed",
    "passed_slots",
    "record_ahead",
    "record_moved",
    "record_parked",
    "skips_json",
]


def owed(
    params: Mapping[bulk.Key, Any], found: Mapping[bulk.Key, Row], now: datetime
) -> list[bulk.Key]:
    """The keys of a batch's existing jobs (``found``: their rows before the apply) whose
    slot is overdue: those a new timing may move past slots to record."""
    return [key for key in params if key in found and overdue(found[key], now)]


async def record_moved(
    db: ScopedConnection,
    keys: Sequence[bulk.Key],
    found: Mapping[bulk.Key, Row],
    written: Mapping[bulk.Key, Row],
    now: datetime,
    by: str,
) -> None:
    """Record skipped the overdue slots that the jobs of ``keys`` (``owed``) pass from
    their row before (``found``) to the one ``upsert_jobs`` wrote (``written``; a job it
    left as it was keeps its slot and passes nothing): ``dropped_slots``, in one statement
    for the batch."""
    records = []
    for key in keys:
        if key not in written:
            continue
        old, new = Job.from_row(found[key]), Job.from_row(written[key])
        skips = dropped_slots(old, new, now, by)
        if skips and old.watch and new.slot_at != old.slot_at:
            rest = await declare_late(db, old, now)
            skips = dropped_slots(rest, new, now, by) if rest is not old else skips
        if skips:
            records.append({"id": str(old.id), "skips": json.loads(skips_json(skips))})
    if records:
        await db.all("record_skips_each", {"jobs": Jsonb(records), "now": now})


async def record_ahead(
    db: ScopedConnection,
    keys: Sequence[bulk.Key],
    params: Mapping[bulk.Key, Mapping[str, Any]],
    found: Mapping[bulk.Key, Row],
    now: datetime,
    by: str,
) -> bool:
    """For a login that writes no past runs (the web's: ``record_skipped`` records for it
    only slots at or after the job's own), ``record_moved`` before the upsert moves the
    jobs of ``keys``, asking where it puts each of the upsert itself, run in a savepoint
    rolled back (``bulk.probe``); whether it did. Any other login records after the upsert,
    from the rows it returns (``record_moved``): one upsert a batch."""
    if not keys or await db.writes_runs():
        return False
    probed = await bulk.probe(db, [params[key] for key in keys])
    await record_moved(db, keys, found, probed, now, by)
    return True


async def record_parked(db: ScopedConnection, row: Row, now: datetime, by: str) -> None:
    """Record skipped the slots the job of ``row`` owes (``overdue``) as ``by`` makes it an
    each-zone parent, which never runs: its children, one per zone, run its slots from
    their creation on (docs/zones.md). A running one's slot is its run's; those after it
    up to ``now`` are recorded."""
    if not overdue(row, now):
        return
    job = Job.from_row(row)
    skips = passed_slots(job, now, f"skipped by {by}: made an each-zone job before it ran")
    if skips:
        await db.all("record_skips", {"id": job.id, "skips": skips_json(skips), "now": now})


async def declare_late(db: ScopedConnection, job: Job, now: datetime) -> Job:
    """A watch job's awaited slots that no ping came for within its ``late_after_s`` by
    ``now`` are missed, whether or not a late pass has run since (no node up): an action
    that moves the job past them declares them missed as the late pass does (a failed run
    and a ``late`` alert; ``watch_declare_missed``, as the schema's owner), not skipped by
    the action. ``MAX_RECORDED`` a call, up to ``MAX_DECLARED`` (6.9 days of a minutely
    job: one action never writes an unbounded transaction; past it, the oldest are declared
    and the action passes the rest, as before). Returns the job as it stands after them,
    from which the action passes the rest; ``job`` itself if none is late."""
    if not job.watch or job.status != JobStatus.IDLE or job.slot_at > now:
        return job
    start = job.next_run_at or job.slot_at
    for _ in range(MAX_DECLARED // passing.MAX_RECORDED):
        walk = late_slots(
            job.parsed_schedule(), job.rule(), job.slot_at, start, job.late_after_s,
            job.adopt_at, now, passing.MAX_RECORDED,
        )  # fmt: skip
        if not walk.late:
            break
        await db.all("watch_declare_missed", {"id": job.id, "slots": walk.late, "now": now})
        job, start = replace(job, slot_at=walk.slot, next_run_at=walk.start), walk.start
    return job


def overdue(job: Mapping[str, Any], now: datetime) -> bool:
    """Whether the existing job's row (``get_job``) holds a slot due by ``now`` that a new
    timing would move it past: idle on its schedule, its slot's time come (a watch job's
    too: no ping came, and the late pass has not declared it missed yet); or running, whose
    slot is kept but whose completion goes on to the new timing's first slot after now
    (``timing_slot``), past the old timing's slots that came while it ran. A paused one
    owes nothing (its pause recorded what it passed)."""
    return bool(
        job["status"] in (JobStatus.IDLE, JobStatus.RUNNING)
        and not job["paused"]
        and not job["each_zone"]
        and job["slot_at"] <= now
        and not str(job["schedule"]).startswith("@after:")
    )


def dropped_slots(old: Job, new: Job, now: datetime, by: str) -> list[Passing]:
    """The slots of the job's old timing (``old``, its row before the apply) due by ``now``
    that its new row (``new``) leaves without a record, each with why it is recorded
    skipped: ``by`` moved the job past it, or the old calendar or a window skips it.

    A job moved to its new timing's next slot passes every one from its old slot on. One
    that keeps its slot (held at its gate, deferred by a window) has its claim decide the
    slots of the new timing after the change up to then, by catch-up; it passes only the
    old timing's slots after its own that those do not include. Listed as
    ``passing.passed`` lists them: the newest ``MAX_RECORDED``, the oldest standing for the
    others.

    A definition that pauses an idle job (``paused: true``) is a pause: it passes every
    slot due from the job's own on, as ``pulse jobs pause`` records them (``passed_slots``);
    so does one that makes it done (its ``max_runs`` lowered to the runs it ran)."""
    if new.paused and not old.paused and old.status == JobStatus.IDLE:
        return passed_slots(old, now, f"skipped by {by}: paused before it ran")
    if new.status == JobStatus.DONE and old.status == JobStatus.IDLE:
        reason = f"skipped by {by}: max_runs {new.max_runs} reached before it ran"
        return passed_slots(old, now, reason)
    reason = f"skipped by {by}: a new timing moved the job past it before it ran"
    keeper = _timing(new) if new.slot_at == old.slot_at else None
    return passing.passed(_timing(old), old.slot_at, now, reason, keeper)


def passed_slots(job: Job, now: datetime, reason: str) -> list[Passing]:
    """Every slot of the job due by ``now`` from its own slot on, each with ``reason`` (or
    the rule's, for a slot its calendar or a window skips): those a pause moves it past."""
    return passing.passed(_timing(job), job.slot_at, now, reason)


def _timing(job: Job) -> passing.Timing:
    return passing.Timing(job.walked_schedule(), job.rule())


def skips_json(skips: Sequence[Passing]) -> str:
    """The list of ``[slot, reason]`` or ``[slot, reason, skipped_from]`` ``record_skips``
    takes."""
    return json.dumps(
        [[slot.isoformat(), why] + ([] if since is None else [since.isoformat()])
         for slot, why, since in skips]
    )  # fmt: skip
