"""The dates an iCalendar (RFC 5545) file excludes: every date one of its events covers.

Parsing is the ``icalendar`` library's; recurring events (``RRULE``, less ``EXDATE``) are
expanded by ``dateutil.rrule`` over a fixed horizon of years, because a calendar is stored
as a plain set of dates that every node reads the same way (docs/design/calendars.md). An
all-day event covers ``[DTSTART, DTEND)``; a timed event covers the date of its start. Pure:
it reads text handed to it, never a file.
"""

from __future__ import annotations

from datetime import date, datetime, timedelta
from typing import Any

import icalendar
from dateutil.rrule import rrulestr  # type: ignore[import-untyped]

from cluster.errors import InvalidInput

__all__ = ["HORIZON_FIRST_YEAR", "HORIZON_LAST_YEAR", "MAX_DATES", "ics_dates"]

HORIZON_FIRST_YEAR = 2000
HORIZON_LAST_YEAR = 2060
MAX_DATES = 20_000  # a calendar is copied into each job that uses it: keep it bounded
MAX_WALK = 200_000  # occurrences walked, times the dates each covers, over one file
_MAX_SPAN_DAYS = 366


def ics_dates(text: str | bytes) -> frozenset[date]:
    """The dates the events of the iCalendar ``text`` cover; ``InvalidInput`` if unparsable."""
    try:
        parsed = icalendar.Calendar.from_ical(text)
        events = parsed.walk("VEVENT")
    except (ValueError, KeyError, IndexError, TypeError) as exc:
        raise InvalidInput("ics", f"not a valid iCalendar file ({_first_line(exc)})") from exc
    if parsed.name != "VCALENDAR":
        raise InvalidInput("ics", "not a valid iCalendar file (no VCALENDAR)")
    found: set[date] = set()
    walk = _Walk()
    for event in events:
        try:
            found.update(_event_dates(event, walk))
        except (ValueError, KeyError, TypeError, OverflowError) as exc:
            summary = str(event.get("SUMMARY", "?"))
            raise InvalidInput("ics", f"event {summary!r}: {_first_line(exc)}") from exc
        if len(found) > MAX_DATES:
            raise InvalidInput("ics", f"covers more than {MAX_DATES} dates")
    return frozenset(found)


class _Walk:
    """The dates one file may still walk (each occurrence, times the dates it covers): a
    budget per file, not per event, so a feed of many events is bounded like one rule."""

    def __init__(self) -> None:
        self.left = MAX_WALK

    def step(self, dates: int = 1) -> None:
        self.left -= dates
        if self.left < 0:
            raise ValueError(
                f"its rules recur over more than {MAX_WALK} dates before {HORIZON_LAST_YEAR}"
            )


def _event_dates(event: Any, walk: _Walk) -> set[date]:
    if event.get("DTSTART") is None:
        raise ValueError("has no DTSTART")
    start = _moment(event, "DTSTART")
    span = _span_days(event, start)
    covered: set[date] = set()
    for first in _starts(event, start, walk):
        walk.step(span - 1)  # each date an occurrence covers is work, repeats included
        covered.update(_as_date(first) + timedelta(days=i) for i in range(span))
    return covered


def _span_days(event: Any, start: date | datetime) -> int:
    """How many dates one occurrence covers: all-day events to DTEND (exclusive)."""
    if isinstance(start, datetime):
        return 1
    if event.get("DTEND") is not None:
        end = _moment(event, "DTEND")
        days = (_as_date(end) - start).days
    elif event.get("DURATION") is not None:
        days = event.decoded("DURATION").days
    else:
        days = 1
    if not 1 <= days <= _MAX_SPAN_DAYS:
        raise ValueError(f"an event must span 1 to {_MAX_SPAN_DAYS} days, not {days}")
    return int(days)


def _starts(event: Any, start: date | datetime, walk: _Walk) -> list[date | datetime]:
    rule = event.get("RRULE")
    if rule is None:
        return [start]
    moment = start if isinstance(start, datetime) else datetime(start.year, start.month, start.day)
    naive = moment.replace(tzinfo=None)
    text = rule.to_ical().decode().replace("\\;", ";")
    horizon = datetime(HORIZON_FIRST_YEAR, 1, 1)
    try:
        recurrence = rrulestr(text, dtstart=_near(naive, rule, horizon))
    except (ValueError, TypeError) as exc:
        raise ValueError(f"RRULE {text!r} cannot be read") from exc
    first = max(naive, horizon)
    last = datetime(HORIZON_LAST_YEAR, 12, 31, 23, 59, 59)
    excluded = _exdates(event)
    occurrences: list[date | datetime] = []
    # Walked one by one and bounded: an RRULE can recur every second for ever.
    for occurrence in recurrence:
        if occurrence > last:
            break
        walk.step()
        if occurrence >= first and occurrence.date() not in excluded:
            occurrences.append(occurrence)
    return occurrences


_PERIOD_S = {"HOURLY": 3600, "MINUTELY": 60, "SECONDLY": 1}


def _near(start: datetime, rule: Any, horizon: datetime) -> datetime:
    """The start of the rule's last period at or before ``horizon`` that is a whole number
    of its intervals after ``start``: the same occurrences from there on, without walking
    the years before the horizon. ``start`` itself when the rule counts its occurrences
    (COUNT runs from the first), starts after the horizon, or the moved date is invalid."""
    if start >= horizon or rule.get("COUNT"):
        return start
    freq = str((rule.get("FREQ") or [""])[0]).upper()
    interval = int((rule.get("INTERVAL") or [1])[0]) or 1
    try:
        if freq == "YEARLY":
            years = (horizon.year - start.year) // interval * interval
            return start.replace(year=start.year + years)
        if freq == "MONTHLY":
            months = (horizon.year - start.year) * 12 + horizon.month - start.month
            moved = start.month - 1 + months // interval * interval
            return start.replace(year=start.year + moved // 12, month=moved % 12 + 1)
        period_s = 7 * 86400 if freq == "WEEKLY" else _PERIOD_S.get(freq, 86400)
        step_s = period_s * interval
        elapsed_s = (horizon - start) // timedelta(seconds=1)
        return start + timedelta(seconds=elapsed_s // step_s * step_s)
    except (ValueError, OverflowError):
        return start


def _exdates(event: Any) -> set[date]:
    values = event.get("EXDATE")
    if values is None:
        return set()
    lists = values if isinstance(values, list) else [values]
    found: set[date] = set()
    for exdate in lists:
        try:  # the parser keeps what it cannot read as a broken property
            dts = [d.dt for d in exdate.dts]
        except (AttributeError, ValueError, TypeError):
            dts = []
        if not dts or not all(isinstance(d, date) for d in dts):
            shown = exdate.to_ical().decode() if hasattr(exdate, "to_ical") else str(exdate)
            raise ValueError(f"EXDATE {shown!r} is not a list of dates")
        found.update(_as_date(d) for d in dts)
    return found


def _moment(event: Any, key: str) -> date | datetime:
    """The date or time of ``key``; the parser keeps a value it cannot read as text, which
    must not reach the arithmetic as one."""
    value = event.decoded(key)
    if not isinstance(value, date):
        raw = event.get(key)
        shown = raw.to_ical().decode() if hasattr(raw, "to_ical") else str(value)
        raise ValueError(f"{key} {shown!r} is not a date (YYYYMMDD or YYYYMMDDTHHMMSS)")
    return value


def _as_date(value: date | datetime) -> date:
    return value.date() if isinstance(value, datetime) else value


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0][:200] if text else type(exc).__name__
