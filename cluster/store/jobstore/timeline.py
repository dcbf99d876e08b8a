"""A job's coming slots as ``pulse jobs show`` and the console tell them: each run with its
start and why it moved, the slots its calendar or windows skip between them, the explained
timeline (``--explain``) and an outage's catch-up (``--outage``).

Pure over a job read model (``cluster.timing.timeline`` does the arithmetic).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from cluster.errors import InvalidInput
from cluster.jobs.models import Job, JobStatus, iso
from cluster.timing.calendared import CalendarRule, Decision, jittered_start
from cluster.timing.catchup import CatchUp
from cluster.timing.instants import US
from cluster.timing.timeline import Step, explain, outage

__all__ = ["calendar_timeline", "explain_job", "outage_of"]

MAX_SKIPS_SHOWN = 50


def calendar_timeline(job: Job, rule: CalendarRule, now: datetime, runs: int) -> dict[str, Any]:
    """``next_slots``/``next_starts`` decided by the calendar, ``next_reasons`` (why each run
    moved, or null) and ``calendar_skips`` ([{slot, reason}] before the last run listed)."""
    schedule = job.parsed_schedule()
    found: list[Decision] = []
    skips: list[Decision] = []
    cursor: Decision | datetime = now
    if job.status == JobStatus.IDLE and job.next_run_at is not None:
        decided = rule.decide(schedule, job.slot_at)
        cursor = decided if decided.runs else Decision(job.slot_at, job.next_run_at, True)
        found.append(cursor)
    try:
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
    if found and job.status == JobStatus.IDLE and job.next_run_at is not None:
        starts[0] = job.next_run_at  # the stored start: a retry's, or the planned one
    return {
        "next_slots": [iso(d.slot) for d in found],
        "next_starts": [iso(s) for s in starts],
        "next_reasons": [d.reason if d.moved or d.deferred else None for d in found],
        "calendar_skips": [{"slot": iso(d.slot), "reason": d.reason} for d in skips],
    }


def explain_job(job: Job, now: datetime, runs: int) -> list[Step]:
    """``pulse jobs show --explain``: the job's next runs from its planned slot (or from
    ``now`` when it has none), each with its DST rule, calendar, window and jitter."""
    after = now
    if job.status == JobStatus.IDLE and job.next_run_at is not None:
        after = min(job.slot_at, job.next_run_at) - US
    return explain(
        job.parsed_schedule(), job.rule(), after, runs,
        tenant=job.tenant, name=job.name, jitter_s=job.jitter_s,
    )  # fmt: skip


def outage_of(job: Job, start: datetime, end: datetime) -> list[Step]:
    """``pulse jobs show --outage FROM..TO``: what the job's catch-up policy would run, skip
    or backfill if no node ran from ``start`` until ``end``."""
    if end <= start:
        raise InvalidInput("outage", "FROM..TO: TO must be after FROM")
    policy = CatchUp(job.catch_up, job.grace_s, job.max_backfill)  # type: ignore[arg-type]
    return outage(job.parsed_schedule(), job.rule(), policy, start, end)
