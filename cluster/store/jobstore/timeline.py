"""A job's slots as ``pulse jobs show`` and the console tell them: each run with its start
and why it moved, the slots its calendar or windows skip between them, the explained
timeline (``--explain``, from now or any instant, with what was recorded for the past
slots) and an outage's catch-up (``--outage``).

Pure over a job read model and the records given; ``cluster.timing.timeline`` walks the
slots through the job's fate (``cluster.timing.fate``), as a node decides them.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any, NamedTuple, Protocol

from cluster.errors import InvalidInput
from cluster.jobs.models import Job, JobStatus, RunStatus, iso
from cluster.timing.calendared import CalendarRule, Decision, jittered_start
from cluster.timing.catchup import CatchUp
from cluster.timing.fate import skipped_between
from cluster.timing.instants import US
from cluster.timing.timeline import Step, explain, outage

__all__ = ["Record", "Recorded", "calendar_timeline", "explain_job", "outage_of", "stopped"]

MAX_SKIPS_SHOWN = 50


class Recorded(Protocol):
    """What was recorded for a slot: a run row (``Run``) or a ``Record``."""

    @property
    def status(self) -> str: ...

    @property
    def last_error(self) -> str | None: ...


class Record(NamedTuple):
    status: str
    last_error: str | None


def catch_up_of(job: Job) -> CatchUp:
    return CatchUp(job.catch_up, job.grace_s, job.max_backfill)  # type: ignore[arg-type]


def calendar_timeline(job: Job, rule: CalendarRule, now: datetime, runs: int) -> dict[str, Any]:
    """``next_slots``/``next_starts`` decided by the calendar, ``next_reasons`` (why each run
    moved, or null) and ``calendar_skips`` ([{slot, reason}] from now to the last run
    listed: those before the job's slot were recorded when it was planned)."""
    schedule = job.parsed_schedule()
    found: list[Decision] = []
    skips: list[Decision] = []
    cursor: Decision | datetime = now
    planned = _planned(job)
    if planned is not None:
        decided = rule.decide(schedule, job.slot_at)
        cursor = decided if decided.runs else Decision(job.slot_at, planned, True)
        found.append(cursor)
    try:
        if planned is not None:
            ahead = skipped_between(schedule, rule, now, job.slot_at, MAX_SKIPS_SHOWN)
            skips += [Decision(p.slot, p.slot, False, p.reason) for p in ahead]
        for decision in rule.decisions_after(schedule, cursor):
            if len(found) >= runs:
                break
            if decision.runs:
                found.append(decision)
            elif len(skips) < MAX_SKIPS_SHOWN:
                skips.append(decision)
    except InvalidInput:
        pass  # the calendar lets no further slot run: show what there is
    starts = [jittered_start(d, job.tenant, job.name, job.jitter_s) for d in found]
    if found and planned is not None:
        starts[0] = planned  # the stored start: a retry's, or the planned one
    return {
        "next_slots": [iso(d.slot) for d in found],
        "next_starts": [iso(s) for s in starts],
        "next_reasons": [d.reason if d.moved or d.deferred else None for d in found],
        "calendar_skips": [{"slot": iso(d.slot), "reason": d.reason} for d in skips],
    }


def _planned(job: Job) -> datetime | None:
    """The start of the slot an idle job waits for (None: running, paused, done)."""
    return job.next_run_at if job.status == JobStatus.IDLE else None


def stopped(job: Job, now: datetime) -> str | None:
    """Why no slot of the job runs from ``now`` (done, paused), or when the next one may
    (paused until a time); None for a job whose slots run."""
    if job.status == JobStatus.DONE:
        return "done: no slot runs any more"
    if job.status == JobStatus.PAUSED:
        return "paused: no slot runs until it is resumed"
    if job.paused_until is not None and job.paused_until > now:
        return f"paused until {iso(job.paused_until)}: its next slot is {iso(job.slot_at)}"
    return None


def explain_job(
    job: Job,
    now: datetime,
    runs: int,
    *,
    after: datetime | None = None,
    recorded: Mapping[datetime, Recorded] | None = None,
) -> list[Step]:
    """``pulse jobs show --explain``: the job's next ``runs`` runs after ``after`` (default:
    now, or its planned slot if that is earlier) and the slots skipped among them, each with
    its DST rule, calendar, window, jitter and catch-up, and for each slot ``recorded``
    holds, what was recorded. A done or paused job lists no slot after ``now``."""
    planned = _planned(job)
    if after is None:
        after = now if planned is None else min(now, job.slot_at - US, planned - US)
    steps, extra = _walk(job, after, runs), 0
    while planned is not None:  # runs the job will not do (pause --until): not counted
        passed = sum(1 for s in steps if s.start is not None and now < s.slot < job.slot_at)
        if passed == extra:
            break
        if passed > MAX_SKIPS_SHOWN:  # too many to list: from the job's slot on
            steps = _walk(job, job.slot_at - US, runs)
            break
        steps, extra = _walk(job, after, runs + passed), passed
    records = recorded or {}
    held = stopped(job, now) is not None and job.status != JobStatus.IDLE
    shown: list[Step] = []
    for step in steps:
        record = records.get(step.slot)
        if record is not None:
            shown.append(_recorded(step, record))
        elif job.status == JobStatus.RUNNING and step.slot == job.slot_at:
            shown.append(Step(step.slot, step.start, "running", step.notes))
        elif step.slot <= now:
            shown.append(Step(step.slot, step.start, step.action, (*step.notes, "no record")))
        elif held:
            continue  # done or paused: no slot after now runs
        elif planned is not None and step.start is not None and now < step.slot < job.slot_at:
            why = f"not planned: the job's next slot is {iso(job.slot_at)}"
            shown.append(Step(step.slot, None, "skipped", (*step.notes, why)))
        else:
            shown.append(step)
    return shown


def _walk(job: Job, after: datetime, runs: int) -> list[Step]:
    return explain(
        job.parsed_schedule(), job.rule(), after, runs,
        tenant=job.tenant, name=job.name, jitter_s=job.jitter_s, catch_up=catch_up_of(job),
    )  # fmt: skip


def _recorded(step: Step, record: Recorded) -> Step:
    why = f"recorded {record.status}" + (f": {record.last_error}" if record.last_error else "")
    notes = tuple(n for n in step.notes if n != record.last_error)
    start = None if record.status == RunStatus.SKIPPED else step.start
    return Step(step.slot, start, record.status, (*notes, why))


def outage_of(job: Job, start: datetime, end: datetime) -> list[Step]:
    """``pulse jobs show --outage FROM..TO``: what the job's catch-up policy would run, skip
    or backfill if no node ran from ``start`` until ``end``."""
    if end <= start:
        raise InvalidInput("outage", "FROM..TO: TO must be after FROM")
    return outage(
        job.parsed_schedule(), job.rule(), catch_up_of(job), start, end,
        tenant=job.tenant, name=job.name, jitter_s=job.jitter_s,
    )  # fmt: skip
