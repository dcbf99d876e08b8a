"""A calendar job's coming slots as ``pulse jobs show`` and the console tell them: each run
with its start and why it moved, and the slots the calendar skips between them, with why.

Pure over a job read model; in the store because ``JobStore.details`` is its one caller.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from cluster.errors import InvalidInput
from cluster.jobs.models import Job, iso
from cluster.timing.calendared import CalendarRule, Decision, jittered_start

__all__ = ["calendar_timeline"]

MAX_SKIPS_SHOWN = 50


def calendar_timeline(job: Job, rule: CalendarRule, now: datetime, runs: int) -> dict[str, Any]:
    """``next_slots``/``next_starts`` decided by the calendar, ``next_reasons`` (why each run
    moved, or null) and ``calendar_skips`` ([{slot, reason}] before the last run listed)."""
    schedule = job.parsed_schedule()
    found: list[Decision] = []
    skips: list[Decision] = []
    cursor: Decision | datetime = now
    if job.status == "idle" and job.next_run_at is not None:
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
    if found and job.status == "idle" and job.next_run_at is not None:
        starts[0] = job.next_run_at  # the stored start: a retry's, or the planned one
    return {
        "next_slots": [iso(d.slot) for d in found],
        "next_starts": [iso(s) for s in starts],
        "next_reasons": [d.reason if d.moved or d.deferred else None for d in found],
        "calendar_skips": [{"slot": iso(d.slot), "reason": d.reason} for d in skips],
    }
