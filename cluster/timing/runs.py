"""A job's runs, with a calendar rule or without one: its first run, the planned slot as a
run, the run after a run and the slots skipped on the way, and the origin its run row
records (when a run starts, jitter included, is ``calendared.jittered_start``).

A job without a rule runs every slot of its schedule at its time; these ask its
``CalendarRule`` only when it has one, so the job store, the watch sweep and
``cluster.timing.watching`` never branch on the rule themselves. Kept apart from
``cluster.timing.calendared``, which owns what a rule decides. Pure, like the rest of
``cluster.timing``.
"""

from __future__ import annotations

from datetime import datetime

from cluster.timing.calendared import CalendarRule, Decision
from cluster.timing.instants import US
from cluster.timing.schedule import Schedule

__all__ = ["current_run", "first_run", "origin_of", "planned_from", "run_after"]


def first_run(schedule: Schedule, rule: CalendarRule | None, after: datetime) -> Decision:
    """The first run starting after ``after`` (a one-off: its slot, even if past)."""
    if schedule.at is not None:
        return Decision(schedule.at, schedule.at, True)
    if rule is None:
        slot = schedule.next_after(after)
        return Decision(slot, slot, True)
    return rule.next_run(schedule, after)[0]


def current_run(schedule: Schedule, rule: CalendarRule | None, slot: datetime) -> Decision:
    """The planned slot ``slot`` as a run (moved or not, as ``rule`` says)."""
    decision = rule.decide(schedule, slot) if rule is not None else None
    return decision if decision is not None and decision.runs else Decision(slot, slot, True)


def run_after(
    schedule: Schedule, rule: CalendarRule | None, run: Decision
) -> tuple[Decision, list[Decision]]:
    """The run after ``run`` and the slots the calendar skips before it."""
    if rule is None:
        slot = schedule.next_after(run.slot)
        return Decision(slot, slot, True), []
    return rule.next_run(schedule, run)


def origin_of(run: Decision) -> str | None:
    """The run row's origin of ``run``: ``window`` (deferred to a blackout window's end),
    ``calendar`` (moved to another business day), else None (its schedule)."""
    if run.deferred:
        return "window"
    return "calendar" if run.moved else None


def planned_from(paused_until: datetime | None, now: datetime) -> datetime:
    """The instant after which a job planned again now (a new timing, a calendar or window
    change) takes its next slot: ``now``, or, while a ``pause --until`` holds it, the
    instant before that time, as the pause planned it, so no slot inside the pause runs
    (test_a_new_timing_keeps_a_pause_until_its_time)."""
    if paused_until is not None and paused_until > now:
        return paused_until - US
    return now
