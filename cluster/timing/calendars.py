"""Business calendars: which dates are business days, as pure arithmetic on dates.

A calendar is a set of business weekdays (``mon-fri`` by default) minus a set of excluded
dates (holidays). Every question is about a ``date`` in the job's time zone: a slot's
business day is the date of its local wall time, so DST changes never move a slot to
another day (``local_date``). ICS files and the ``calendars`` table turn into this shape
elsewhere (``cluster.timing.icsdates``, ``cluster.store.jobstore.calendars``); slot planning against
a calendar is ``cluster.timing.calendared``.

The API (docs/time.md):

* ``is_business_day(cal, day)``;
* ``next_business_day(cal, day)`` / ``previous_business_day(cal, day)``: the nearest
  business day strictly after / before ``day``;
* ``nth_business_day(cal, year, month, n)``: the n-th business day of the month, ``n >= 1``
  from its start, ``n <= -1`` from its end (``-1``: the last); None if the month has fewer.
"""

from __future__ import annotations

import calendar as stdcalendar
import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta
from zoneinfo import ZoneInfo

from cluster.errors import InvalidInput

__all__ = [
    "DEFAULT_WEEKDAYS",
    "WEEKDAY_NAMES",
    "Calendar",
    "business_days_in_month",
    "format_weekdays",
    "is_business_day",
    "local_date",
    "next_business_day",
    "nth_business_day",
    "parse_dates",
    "parse_weekdays",
    "previous_business_day",
]

WEEKDAY_NAMES = ("mon", "tue", "wed", "thu", "fri", "sat", "sun")
DEFAULT_WEEKDAYS = frozenset(range(5))
_FULL_NAMES = ("monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday")
_DAY = timedelta(days=1)


@dataclass(frozen=True)
class Calendar:
    """Business weekdays (0 = Monday, as ``date.weekday()``) minus excluded dates."""

    name: str = ""
    weekdays: frozenset[int] = DEFAULT_WEEKDAYS
    excluded: frozenset[date] = field(default_factory=frozenset)

    def __post_init__(self) -> None:
        weekdays = frozenset(self.weekdays)
        if not weekdays or not weekdays <= frozenset(range(7)):
            raise InvalidInput("weekdays", "must name at least one weekday, mon..sun")
        object.__setattr__(self, "weekdays", weekdays)
        object.__setattr__(self, "excluded", frozenset(self.excluded))

    @classmethod
    def of(
        cls,
        name: str = "",
        weekdays: str | Iterable[int] = "mon-fri",
        holidays: Iterable[date | str] = (),
    ) -> Calendar:
        """A calendar from a weekday rule (``"mon-fri"`` or 0..6) and dates or ISO texts."""
        days = parse_weekdays(weekdays) if isinstance(weekdays, str) else frozenset(weekdays)
        dated = {d for d in holidays if isinstance(d, date)}
        texts = [d for d in holidays if isinstance(d, str)]
        return cls(name, days, frozenset({_day(d) for d in dated} | parse_dates(texts)))

    def is_business_day(self, day: date) -> bool:
        day = _day(day)
        return day.weekday() in self.weekdays and day not in self.excluded

    def next_business_day(self, day: date) -> date:
        """The first business day strictly after ``day``."""
        return self._walk(_day(day), _DAY)

    def previous_business_day(self, day: date) -> date:
        """The last business day strictly before ``day``."""
        return self._walk(_day(day), -_DAY)

    def nth_business_day(self, year: int, month: int, n: int) -> date | None:
        """The ``n``-th business day of the month (``-1``: the last); None if there is none."""
        if isinstance(n, bool) or not isinstance(n, int) or n == 0:
            raise InvalidInput("business_day", f"must be a non-zero whole number, got {n!r}")
        days = business_days_in_month(self, year, month)
        index = n - 1 if n > 0 else n
        return days[index] if -len(days) <= index < len(days) else None

    def to_json(self) -> str:
        """Canonical text (the job rows' snapshot): equal calendars give equal text."""
        return json.dumps(
            {
                "name": self.name,
                "weekdays": sorted(self.weekdays),
                "excluded": [d.isoformat() for d in sorted(self.excluded)],
            },
            separators=(",", ":"),
        )

    @classmethod
    def from_json(cls, text: str) -> Calendar:
        data = json.loads(text)
        return cls(
            name=str(data.get("name", "")),
            weekdays=frozenset(int(d) for d in data["weekdays"]),
            excluded=frozenset(date.fromisoformat(d) for d in data["excluded"]),
        )

    def _walk(self, day: date, step: timedelta) -> date:
        # Terminates: at least one weekday is a business day and the exclusions are finite.
        day += step
        while not self.is_business_day(day):
            day += step
        return day


def is_business_day(cal: Calendar, day: date) -> bool:
    """Whether ``day`` is a business weekday of ``cal`` and not one of its excluded dates."""
    return cal.is_business_day(day)


def next_business_day(cal: Calendar, day: date) -> date:
    """The first business day strictly after ``day``."""
    return cal.next_business_day(day)


def previous_business_day(cal: Calendar, day: date) -> date:
    """The last business day strictly before ``day``."""
    return cal.previous_business_day(day)


def nth_business_day(cal: Calendar, year: int, month: int, n: int) -> date | None:
    """The ``n``-th business day of ``year``-``month`` (``n < 0`` counts from its end)."""
    return cal.nth_business_day(year, month, n)


def business_days_in_month(cal: Calendar, year: int, month: int) -> list[date]:
    length = stdcalendar.monthrange(year, month)[1]
    days = (date(year, month, d) for d in range(1, length + 1))
    return [d for d in days if cal.is_business_day(d)]


def local_date(moment: datetime, tz: str | ZoneInfo) -> date:
    """The date of the aware ``moment`` on the wall clock of zone ``tz``."""
    zone = tz if isinstance(tz, ZoneInfo) else ZoneInfo(tz)
    return moment.astimezone(zone).date()


def parse_weekdays(text: str) -> frozenset[int]:
    """``mon-fri``, ``sun-thu``, ``mon,wed,fri`` or ``mon-thu,sat`` (ranges may wrap)."""
    if not isinstance(text, str) or not text.strip():
        raise InvalidInput("weekdays", "must name weekdays like mon-fri or mon,wed,fri")
    days: set[int] = set()
    for part in text.lower().replace(" ", "").split(","):
        first, _, last = part.partition("-")
        start, end = _weekday(first), _weekday(last or first)
        days.update((start + i) % 7 for i in range((end - start) % 7 + 1))
    return frozenset(days)


def format_weekdays(weekdays: Iterable[int]) -> str:
    return ",".join(WEEKDAY_NAMES[d] for d in sorted(weekdays))


def parse_dates(values: Iterable[str]) -> frozenset[date]:
    """ISO dates (``2026-12-25``), given one by one or comma-separated."""
    found: set[date] = set()
    for value in values:
        for text in str(value).split(","):
            if not text.strip():
                continue
            try:
                found.add(date.fromisoformat(text.strip()))
            except ValueError as exc:
                raise InvalidInput(
                    "dates", f"{text.strip()!r} is not a date like 2026-12-25"
                ) from exc
    return frozenset(found)


def _day(value: date) -> date:
    """A date; a datetime gives its own date (on its own clock: see ``local_date``)."""
    return value.date() if isinstance(value, datetime) else value


def _weekday(name: str) -> int:
    for index, full in enumerate(_FULL_NAMES):
        if name in (full, full[:3]):
            return index
    raise InvalidInput("weekdays", f"{name!r} is not a weekday (mon, tue, ... sun)")
