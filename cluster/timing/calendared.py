"""Slots against a business calendar: which run, which move, which are skipped, and why.

A job with a calendar keeps its schedule's slots as their identity (the run row's
``scheduled_for``, the idempotency key); the calendar decides, per slot, from the slot's
date on the job's wall clock (``cluster.timing.calendars``):

* on a business day, the slot runs at its time;
* on an excluded date, ``on_excluded`` says: ``skip`` (recorded skipped with the calendar as
  reason), or ``next-business-day`` / ``previous-business-day``: the slot starts at the same
  wall time on that business day, like a jitter offset (only its start moves). A slot moved
  onto a day that has slots of its own, or onto the start of another moved slot, is
  recorded skipped instead (coalesced): nothing runs twice for one day's work.

``business_day=n`` narrows the schedule to the n-th business day of each month (``-1``: the
last); the other slots are not slots at all. Pure, like the rest of ``cluster.timing``.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta
from typing import Literal, NamedTuple
from zoneinfo import ZoneInfo

from cluster.errors import InvalidInput
from cluster.timing.calendars import Calendar
from cluster.timing.instants import US
from cluster.timing.jitter import jitter_offset
from cluster.timing.schedule import Schedule
from cluster.timing.wallclock import transition

__all__ = [
    "EVERY_DAY",
    "ON_EXCLUDED",
    "CalendarRule",
    "Decision",
    "Window",
    "jittered_start",
    "parse_on_excluded",
]

OnExcluded = Literal["skip", "next-business-day", "previous-business-day"]
ON_EXCLUDED: tuple[OnExcluded, ...] = ("skip", "next-business-day", "previous-business-day")
MAX_IDLE_STEPS = 200_000  # slots walked without a run: the calendar never lets this one run
MAX_IDLE_MONTHS = 1200
GREGORIAN_CYCLE = 400  # years after which weekdays fall on the same dates again
MAX_GROUP = 1000  # slots moved onto one day: beyond this, the rest are recorded skipped
_EARLY = timedelta(hours=3)  # before any zone's local midnight of the same date, in UTC


def parse_on_excluded(value: object) -> OnExcluded:
    text = value.strip().lower() if isinstance(value, str) else value
    for choice in ON_EXCLUDED:
        if text == choice:
            return choice
    raise InvalidInput("on_excluded", f"must be one of {', '.join(ON_EXCLUDED)}, got {value!r}")


class Decision(NamedTuple):
    """One slot's fate: it runs at ``start`` (``moved``: not its own time), or is skipped."""

    slot: datetime
    start: datetime
    runs: bool
    reason: str | None = None
    moved: bool = False
    deferred: bool = False  # moved to the end of a blackout window: catch-up decides it


class Window(NamedTuple):
    """A blackout window ``[start, end)``: its slots are skipped, or deferred to its end."""

    id: int
    start: datetime
    end: datetime
    defer: bool = False

    def describe(self) -> str:
        return f"blackout window {self.id} ({self.start.isoformat()} to {self.end.isoformat()})"


EVERY_DAY = Calendar("", frozenset(range(7)))  # the calendar of a job with windows only


@dataclass(frozen=True)
class CalendarRule:
    """A job's calendar, what to do with excluded slots, its business-day index, and the
    blackout windows that apply to it."""

    calendar: Calendar = EVERY_DAY
    on_excluded: OnExcluded = "skip"
    business_day: int | None = None
    windows: tuple[Window, ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "on_excluded", parse_on_excluded(self.on_excluded))
        n = self.business_day
        if n is not None and (isinstance(n, bool) or not isinstance(n, int) or n == 0):
            raise InvalidInput("business_day", f"must be a non-zero whole number, got {n!r}")
        if n is not None and not -23 <= n <= 23:
            raise InvalidInput("business_day", f"must be between -23 and 23, got {n}")

    def to_json(self) -> str:
        """Canonical text, as job rows keep it (equal rules give equal text)."""
        windows = [[w.id, w.start.isoformat(), w.end.isoformat(), w.defer] for w in self.windows]
        return json.dumps(
            {
                "calendar": None
                if self.calendar == EVERY_DAY
                else json.loads(self.calendar.to_json()),
                "on_excluded": self.on_excluded,
                "business_day": self.business_day,
                "windows": windows,
            },
            separators=(",", ":"),
        )

    @classmethod
    def from_json(cls, text: str) -> CalendarRule:
        data = json.loads(text)
        found = data.get("calendar")
        calendar = EVERY_DAY if found is None else Calendar.from_json(json.dumps(found))
        windows = tuple(
            Window(int(i), datetime.fromisoformat(a), datetime.fromisoformat(b), bool(d))
            for i, a, b, d in data.get("windows", ())
        )
        return cls(calendar, data["on_excluded"], data.get("business_day"), windows)

    def decide(self, schedule: Schedule, slot: datetime) -> Decision:
        """The decision of one slot of ``schedule`` (moved slots: not checked for coalescing)."""
        return self._windowed(self._decide(schedule, slot))

    def decide_exactly(self, schedule: Schedule, slot: datetime) -> Decision:
        """The decision of one slot as the walk makes it: a slot moved onto a day with
        slots of its own, or onto another moved slot's start, is skipped (coalesced)."""
        if self._calendar_moves(schedule, slot):
            found = next(self.decisions_after(schedule, slot - US), None)
            if found is not None and found.slot == slot:
                return found
        return self.decide(schedule, slot)

    def _windowed(self, decision: Decision) -> Decision:
        """A run inside a blackout window: skipped, or deferred to the window's end (and
        past any window that end falls in)."""
        for _ in range(len(self.windows)):
            inside = next((w for w in self.windows if w.start <= decision.start < w.end), None)
            if not decision.runs or inside is None:
                return decision
            if not inside.defer:
                return Decision(decision.slot, decision.slot, False, inside.describe())
            reason = f"deferred to {inside.end.isoformat()} by {inside.describe()}"
            decision = decision._replace(start=inside.end, reason=reason, deferred=True)
        return decision

    def _calendar_moves(self, schedule: Schedule, slot: datetime) -> bool:
        if self.on_excluded == "skip" or self.business_day is not None:
            return False
        return not self.calendar.is_business_day(slot.astimezone(ZoneInfo(schedule.tz)).date())

    def _decide(self, schedule: Schedule, slot: datetime) -> Decision:
        zone = ZoneInfo(schedule.tz)
        day = slot.astimezone(zone).date()
        if self.calendar.is_business_day(day):
            return Decision(slot, slot, True)
        if self.on_excluded == "skip":
            return Decision(slot, slot, False, self._excluded(day))
        target = self._target(day)
        return Decision(slot, _on(slot, target, zone), True, self._moved(day, target), True)

    def decisions_after(self, schedule: Schedule, after: Decision | datetime) -> Iterator[Decision]:
        """Decisions in the order the job meets them, after the run ``after`` (a decision)
        or after the instant ``after`` (only runs starting after it, and what lies between).

        Runs come in non-decreasing start order; a skip comes before the run that passes it.
        """
        for decision in self._calendar_decisions(schedule, after):
            yield self._windowed(decision)

    def _calendar_decisions(
        self, schedule: Schedule, after: Decision | datetime
    ) -> Iterator[Decision]:
        zone = ZoneInfo(schedule.tz)
        if isinstance(after, Decision):
            cursor = after.slot
            if self._calendar_moves(
                schedule, after.slot
            ):  # the rest of its group, then on from the group's last slot
                group, last = self._group(schedule, zone, after.slot)
                slots = [decision.slot for decision in group]
                if after.slot in slots:
                    yield from group[slots.index(after.slot) + 1 :]
                elif schedule.since is not None and after.slot <= schedule.since:
                    # A slot kept from before a new timing: the new timing's slots of its
                    # group are those after the change, all of them ahead of it.
                    yield from group
                else:  # the calendar changed under it: the runs that start later
                    key = (after.start, after.slot)
                    yield from (d for d in group if d.runs and (d.start, d.slot) > key)
                cursor = max(cursor, last)
        else:
            cursor = after
        yield from self._from(
            schedule, zone, cursor, after if isinstance(after, datetime) else None
        )

    def next_run(
        self, schedule: Schedule, after: Decision | datetime
    ) -> tuple[Decision, list[Decision]]:
        """The next run after ``after`` and the skips on the way to it."""
        skips: list[Decision] = []
        for decision in self.decisions_after(schedule, after):
            if decision.runs:
                return decision, skips
            skips.append(decision)
        raise InvalidInput("schedule", f"{schedule.expr!r} has no slot the calendar lets run")

    # -- the walk ------------------------------------------------------------------------

    def _from(
        self, schedule: Schedule, zone: ZoneInfo, cursor: datetime, not_before: datetime | None
    ) -> Iterator[Decision]:
        idle = 0  # steps since the last run: a schedule the calendar never lets run ends
        # Past the last excluded date, weekdays and dates repeat every 400 years (the
        # Gregorian cycle): a walk that found no run by then never will.
        last_excluded = max((d.year for d in self.calendar.excluded), default=0)
        since = cursor.year  # of the walk's start or its last run
        while True:
            idle += 1
            if idle == 1:
                since = cursor.year
            if idle > MAX_IDLE_STEPS or cursor.year > max(since, last_excluded) + GREGORIAN_CYCLE:
                raise InvalidInput(
                    "calendar", f"{schedule.expr!r} has no slot the calendar lets run"
                )
            slot = schedule.next_after(cursor)
            day = slot.astimezone(zone).date()
            if self.business_day is not None:
                target = self.calendar.nth_business_day(day.year, day.month, self.business_day)
                if target == day:
                    yield Decision(slot, slot, True)
                    cursor, idle = slot, 0
                elif idle > MAX_IDLE_MONTHS:
                    raise InvalidInput(
                        "business_day",
                        f"{schedule.expr!r} has no slot on business day {self.business_day}",
                    )
                elif target is not None and target > day:
                    cursor = _day_start(target, zone) - US
                else:
                    cursor = _day_start(_next_month(day), zone) - US
                continue
            if self.calendar.is_business_day(day) or self.on_excluded == "skip":
                group, last = [self._decide(schedule, slot)], slot
            else:
                group, last = self._group(schedule, zone, slot)
            for decision in group:
                if decision.slot <= cursor:  # entered mid-group: before the walk's start
                    continue
                if decision.runs and not_before is not None and decision.start <= not_before:
                    continue
                if decision.runs:
                    idle = 0
                yield decision
            cursor = max(cursor, last)

    def _group(
        self, schedule: Schedule, zone: ZoneInfo, slot: datetime
    ) -> tuple[list[Decision], datetime]:
        """The slots of the excluded days moved onto the same business day as ``slot``'s,
        decided together (runs by start, coalesced ones skipped), and the group's last slot."""
        day = slot.astimezone(zone).date()
        target = self._target(day)
        if _slots_on(schedule, zone, target, 1):
            skipped = [
                Decision(s, s, False, self._coalesced(day_of, target, None))
                for s, day_of in self._excluded_slots(schedule, zone, target)
            ]
            return skipped, skipped[-1].slot if skipped else slot
        found = self._excluded_slots(schedule, zone, target)
        moved = sorted(
            (
                Decision(s, _on(s, target, zone), True, self._moved(d, target), True)
                for s, d in found
            ),
            key=lambda decision: (decision.start, decision.slot),
        )
        decided: list[Decision] = []
        starts: dict[datetime, datetime] = {}
        for decision in moved:
            taken = starts.get(decision.start)
            if taken is not None or len(starts) >= MAX_GROUP:
                day_of = decision.slot.astimezone(zone).date()
                reason = self._coalesced(day_of, target, taken)
                decided.append(decision._replace(runs=False, start=decision.slot, reason=reason))
            else:
                starts[decision.start] = decision.slot
                decided.append(decision)
        return decided, max((s for s, _ in found), default=slot)

    def _excluded_slots(
        self, schedule: Schedule, zone: ZoneInfo, target: date
    ) -> list[tuple[datetime, date]]:
        """The slots of the excluded days whose business day is ``target``, in order."""
        step = timedelta(days=-1 if self.on_excluded == "next-business-day" else 1)
        days: list[date] = []
        day = target + step
        while not self.calendar.is_business_day(day):
            days.append(day)
            day += step
        days.sort()
        found: list[tuple[datetime, date]] = []
        for day in days:
            found += [(s, day) for s in _slots_on(schedule, zone, day, MAX_GROUP * 10)]
        return found

    def _target(self, day: date) -> date:
        if self.on_excluded == "previous-business-day":
            return self.calendar.previous_business_day(day)
        return self.calendar.next_business_day(day)

    # The reasons of a calendar's and a window's skips begin "calendar " and "blackout window ":
    # a change of the rule takes back those recorded ahead by them (withdraw_rule_skips).
    def _excluded(self, day: date) -> str:
        why = "a holiday" if day in self.calendar.excluded else "not a business weekday"
        return f"calendar {self.calendar.name}: {day.isoformat()} is {why}"

    def _moved(self, day: date, target: date) -> str:
        return f"{self._excluded(day)}; moved to {target.isoformat()} ({self.on_excluded})"

    def _coalesced(self, day: date, target: date, taken: datetime | None) -> str:
        into = (
            f"the slot {taken.isoformat()} already starts then"
            if taken is not None
            else "which has slots of its own"
        )
        return f"{self._excluded(day)}; moved to {target.isoformat()}, {into}"


def _slots_on(schedule: Schedule, zone: ZoneInfo, day: date, limit: int) -> list[datetime]:
    """At most ``limit`` slots of ``schedule`` whose wall-clock date in ``zone`` is ``day``."""
    start = _day_start(day, zone) - _EARLY
    slots = schedule.iter_after(start)
    local = ((s, s.astimezone(zone).date()) for s in slots)
    within = itertools.takewhile(lambda pair: pair[1] <= day, local)
    return [s for s, d in itertools.islice((p for p in within if p[1] == day), limit)]


def _day_start(day: date, zone: ZoneInfo) -> datetime:
    return datetime.combine(day, time(0), zone).astimezone(UTC)


def _next_month(day: date) -> date:
    return date(day.year + day.month // 12, day.month % 12 + 1, 1)


def _on(slot: datetime, target: date, zone: ZoneInfo) -> datetime:
    """``slot``'s wall time on the date ``target``: a repeated wall time at its first
    occurrence, one inside a spring-forward gap at the first valid instant after the gap,
    as a job's own slots (docs/jobs.md; tests/unit/test_calendar_reference.py)."""
    wall = datetime.combine(target, slot.astimezone(zone).time())
    first = wall.replace(tzinfo=zone, fold=0).astimezone(UTC)
    other = wall.replace(tzinfo=zone, fold=1).astimezone(UTC)
    return transition(zone, other, first) if other < first else first


def jittered_start(run: Decision, tenant: str, name: str, jitter_s: float) -> datetime:
    """When ``run`` starts: its (maybe moved) start plus its slot's jitter offset."""
    if not jitter_s:
        return run.start
    return run.start + jitter_offset(tenant, name, run.slot, jitter_s)
