"""Where a job with a business calendar goes after a slot: its next run (perhaps moved to
another business day), the slots the calendar skips on the way, and catch-up over runs.

Pure, like ``node.pipeline.outcomes``, which hands calendar jobs here. The calendar comes
with the claimed row (``ClaimedJob.calendar_rule``), parsed once per text: planning a
calendar job costs no statement of its own (docs/design/calendars.md).
"""

from __future__ import annotations

from collections import deque
from datetime import datetime

from cluster.store.lock.records import ClaimedJob, Skip
from cluster.timing.calendared import CalendarRule, Decision, jittered_start
from cluster.timing.catchup import DEFAULT_RECORD_LIMIT, CatchUp
from cluster.timing.durations import format_duration
from cluster.timing.schedule import Schedule
from cluster.timing.timeline import first_kept

__all__ = ["catch_up", "current", "next_run", "rule_of", "start_at"]

CACHE_MAX = 1024
MAX_DUE_WALK = 100_000  # due runs walked after an outage; older ones beyond are coalesced

_rules: dict[str, CalendarRule] = {}
_next: dict[tuple[str, str, str, str, str, datetime], tuple[Decision, tuple[Skip, ...]]] = {}


def rule_of(job: ClaimedJob) -> CalendarRule:
    text = job.calendar_rule
    assert text is not None, "a calendar job"
    found = _rules.get(text)
    if found is None:
        if len(_rules) >= CACHE_MAX:
            _rules.clear()
        found = _rules[text] = CalendarRule.from_json(text)
    return found


def current(job: ClaimedJob, schedule: Schedule, slot: datetime | None = None) -> Decision:
    """The claimed slot (or ``slot``) as a run, moved or not as the calendar says now."""
    slot = job.slot if slot is None else slot
    decision = rule_of(job).decide(schedule, slot)
    return decision if decision.runs else Decision(slot, slot, True)


def next_run(job: ClaimedJob, schedule: Schedule) -> tuple[Decision, tuple[Skip, ...]]:
    """The run after the claimed slot and the slots the calendar skips before it.
    Remembered: the claim and the completion of the slot both ask."""
    assert job.calendar_rule is not None
    key = (job.calendar_rule, job.schedule, job.tz, job.dst_repeated, job.dst_skipped, job.slot)
    found = _next.get(key)
    if found is None:
        if len(_next) >= CACHE_MAX:
            _next.clear()
        run, skips = rule_of(job).next_run(schedule, current(job, schedule))
        found = _next[key] = (run, tuple(_skip(job, s) for s in skips))
    return found


def start_at(job: ClaimedJob, run: Decision) -> datetime:
    """When ``run`` starts: its (maybe moved) start plus the slot's jitter offset."""
    return jittered_start(run, job.tenant, job.name, job.jitter_s)


def catch_up(
    job: ClaimedJob, schedule: Schedule, first: Decision, now: datetime
) -> tuple[Decision, list[Skip]]:
    """The run to do next, from the due run ``first`` on (``first.start <= now``), and the
    slots skipped on the way: by the calendar, and the due runs the catch-up policy drops.
    """
    rule = rule_of(job)
    due: deque[Decision] = deque(maxlen=DEFAULT_RECORD_LIMIT + max(1, job.max_backfill))
    calendar_skips: deque[Skip] = deque(maxlen=DEFAULT_RECORD_LIMIT)
    future: Decision | None = None
    walk = rule.decisions_after(schedule, first)
    due.append(first)
    for count, decision in enumerate(walk):
        if not decision.runs:
            calendar_skips.append(_skip(job, decision))
            continue
        if decision.start > now or count > MAX_DUE_WALK:
            future = decision
            break
        due.append(decision)
    runs = list(due)
    kept = first_kept(runs, catch_up_of(job), now)
    target = runs[kept] if kept < len(runs) else future
    assert target is not None, "the walk ends at a future run"
    dropped = [d for d in runs if d.slot < target.slot]
    skips = [s for s in calendar_skips if s.slot < target.slot]
    skips += [Skip(job.id, d.slot, _missed(job, d, target, now)) for d in dropped]
    skips.sort(key=lambda skip: skip.slot)
    return target, skips


def catch_up_of(job: ClaimedJob) -> CatchUp:
    return CatchUp(job.catch_up, job.grace_s, job.max_backfill)  # type: ignore[arg-type]


def _skip(job: ClaimedJob, decision: Decision) -> Skip:
    return Skip(job.id, decision.slot, decision.reason or "skipped by the calendar")


def _missed(job: ClaimedJob, decision: Decision, target: Decision, now: datetime) -> str:
    late = format_duration(max(0.0, (now - decision.start).total_seconds()))
    if job.catch_up == "skip":
        return f"missed by {late} (catch-up skip, grace {format_duration(job.grace_s)})"
    if job.catch_up == "backfill":
        return f"missed by {late} (catch-up backfill, beyond the cap of {job.max_backfill})"
    return f"missed by {late} (catch-up once: coalesced into {target.slot.isoformat()})"
