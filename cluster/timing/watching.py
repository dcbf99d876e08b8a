"""Which slot a ping of a watch job belongs to, and the slot expected after one: pure.

A watch job's runs come from pings sent by a cron Pulse does not run (docs/jobs.md, "Watch
jobs"). A ping at ``at`` belongs to the latest run of the job's schedule (its calendar and
windows applied, so a holiday slot expects none) that starts no later than ``at`` plus a
small allowance: ``EARLY_S``, or a quarter of the gap to the run after, whichever is less,
for a legacy host whose clock runs a little ahead. A run longer than the gap between two
slots sends ``/start``: its end then belongs to the run it started, not to the latest one.
A slot no ping came for within the job's ``late_after_s`` is missed (``late_slots``): the
late pass declares it so, and so does an operator's action that moves the job past it.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import NamedTuple

from cluster.timing.calendared import CalendarRule, Decision
from cluster.timing.runs import current_run, first_run, run_after
from cluster.timing.schedule import Schedule

EARLY_S = 30.0
# How far back a ping's run is looked for: beyond the longest gap of a real schedule.
_LOOKBACK = timedelta(days=800)
_FIRST_WINDOW = timedelta(minutes=1)


def following(schedule: Schedule, rule: CalendarRule | None, run: Decision) -> Decision:
    """The run after ``run``."""
    return run_after(schedule, rule, run)[0]


def after_slot(schedule: Schedule, rule: CalendarRule | None, slot: datetime) -> Decision:
    """The run after the slot ``slot`` (the slot a watch job was waiting for)."""
    return following(schedule, rule, current_run(schedule, rule, slot))


def allowance(run: Decision, nxt: Decision) -> timedelta:
    """How early a ping may come for ``run``, whose next run is ``nxt``."""
    return min(timedelta(seconds=EARLY_S), (nxt.start - run.start) / 4)


def ping_run(schedule: Schedule, rule: CalendarRule | None, at: datetime) -> Decision | None:
    """The run a ping at ``at`` belongs to; None if the schedule has none that early."""
    window = _FIRST_WINDOW
    while window <= _LOOKBACK:
        run = first_run(schedule, rule, at - window)
        nxt = following(schedule, rule, run)
        if run.start <= at + allowance(run, nxt):
            while True:  # the latest one that qualifies
                after = following(schedule, rule, nxt)
                if nxt.start > at + allowance(nxt, after):
                    return run
                run, nxt = nxt, after
        window *= 4
    return None


class LateWalk(NamedTuple):
    """The awaited slots of a watch job no ping can come for in time any more, and the
    slot it awaits after them (due at ``start``)."""

    late: list[datetime]
    slot: datetime
    start: datetime


def late_slots(
    schedule: Schedule,
    rule: CalendarRule | None,
    slot: datetime,
    start: datetime,
    late_after_s: float,
    adopt_at: datetime | None,
    now: datetime,
    limit: int,
) -> LateWalk:
    """From the slot a watch job awaits (``slot``, due at ``start``), those that started
    more than ``late_after_s`` before ``now`` (at most ``limit``), up to its adoption slot
    (Pulse's from there): each missed unless a ping recorded it."""
    late: list[datetime] = []
    while len(late) < limit and not (adopt_at is not None and slot >= adopt_at):
        if start + timedelta(seconds=late_after_s) >= now:
            break
        late.append(slot)
        nxt = after_slot(schedule, rule, slot)
        slot, start = nxt.slot, nxt.start
    return LateWalk(late, slot, start)
