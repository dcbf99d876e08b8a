"""Cron expressions, through croniter: the only module that imports it.

Owns the cron part of the schedule grammar (5 fields, or 6 with SECONDS FIRST, and the
``@yearly``-style macros): validating the text and compiling it into a day pattern and the
sorted hours, minutes and seconds it fires at, then walking the matching days in wall-clock
order. ``cluster.timing.schedule`` maps those wall times to UTC; croniter's own time-zone
handling is never used (it fires ``30 2 * * *`` twice on Berlin's autumn change). Kept apart so the
schedule's DST rules read without croniter's quirks, and croniter's without the zones.
"""

from __future__ import annotations

import functools
import itertools
import re
from bisect import bisect_left, bisect_right
from collections.abc import Iterator, Sequence
from datetime import datetime, timedelta
from typing import Any

from croniter import CroniterBadDateError, CroniterError, croniter

from cluster.errors import InvalidInput

__all__ = ["FIELDS_HINT", "MACROS", "Times", "compile_cron", "days_after"]

Times = tuple[tuple[int, ...], ...]  # the sorted (hours, minutes, seconds) a cron fires at

MACROS: dict[str, str] = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}
FIELDS_HINT = "expected 5 fields (min hour dom mon dow) or 6 (sec min hour dom mon dow)"
# croniter gives up on a day pattern after this many years; the sparsest satisfiable one
# ("0 0 * 2 1#5", a fifth Monday in February) recurs within 40 years.
_MAX_YEARS = 50
_PROBE_FROM = datetime(2000, 1, 1)
_SECOND = timedelta(seconds=1)
# Hashed (H) and random (R) fields would give every node different slots.
_NODE_DEPENDENT = re.compile(r"(?<![a-z])[hr](?![a-z])", re.IGNORECASE)
_CRON_ECHO = re.compile(r"^\[[^\]]*\]\s*(is not acceptable[,.]?\s*)?")
_FIELD_NUMBER = re.compile(r"in field ([0-5])")
_FIELD_NAMES = ("minute", "hour", "day-of-month", "month", "day-of-week", "second")


def compile_cron(expr: str) -> tuple[str, Times]:
    """(day_expr, (hours, minutes, seconds)) for a normalized cron expression or macro."""
    text = MACROS.get(expr, expr)
    if text.startswith("@"):
        known = ", ".join([*MACROS, "@every <duration>", "@at <ISO time>"])
        raise InvalidInput("schedule", f"unknown macro {expr!r}; expected one of {known}")
    fields = text.split(" ")
    if len(fields) not in (5, 6):
        raise InvalidInput("schedule", f"{FIELDS_HINT}, got {len(fields)} in {expr!r}")
    if len(fields) == 5:
        fields.insert(0, "0")
    if _NODE_DEPENDENT.search(text):
        problem = "hashed (H) and random (R) fields are not supported"
        raise InvalidInput("schedule", f"{problem}: {expr!r}")
    day_expr = "0 0 " + " ".join("*" if f == "?" else f for f in fields[3:])
    try:
        expanded = croniter(" ".join(fields), _PROBE_FROM, second_at_beginning=True).expanded
        times = tuple(_values(expanded[i], size) for i, size in ((1, 24), (0, 60), (5, 60)))
        croniter(day_expr, _PROBE_FROM, max_years_between_matches=_MAX_YEARS).get_next(datetime)
    except CroniterBadDateError as exc:
        raise InvalidInput("schedule", f"{expr!r} never fires") from exc
    except (CroniterError, ValueError, TypeError, KeyError, IndexError) as exc:
        raise InvalidInput("schedule", f"invalid cron expression {expr!r}: {_reason(exc)}") from exc
    return day_expr, times


def _reason(exc: Exception) -> str:
    """croniter's message without its echo of the reordered expression and field numbers."""
    text = _CRON_ECHO.sub("", str(exc)).strip() or "a field is malformed"
    return _FIELD_NUMBER.sub(lambda m: f"in the {_FIELD_NAMES[int(m.group(1))]} field", text)


def _values(raw: list[Any], size: int) -> tuple[int, ...]:
    if raw == ["*"]:
        return tuple(range(size))
    if not raw or not all(isinstance(v, int) and 0 <= v < size for v in raw):
        raise ValueError(f"unsupported field values {raw!r}")
    return tuple(sorted(set(raw)))


def days_after(
    day_expr: str, times: Times, start: datetime
) -> Iterator[tuple[int, int, int, Iterator[tuple[int, ...]]]]:
    """Matching (year, month, day, times of day) strictly after naive ``start``, in order."""
    first_day = (start.year, start.month, start.day)
    year, month, empty_months = start.year, start.month, 0
    while empty_months <= 12 * _MAX_YEARS and year <= 9999:
        days = _month_days(day_expr, year, month)
        for mday in days:
            if (year, month, mday) == first_day:
                bound = (start.hour, start.minute, start.second)
                yield year, month, mday, _tuples_after(times, bound)
            elif (year, month, mday) > first_day:
                yield year, month, mday, itertools.product(*times)
        empty_months = 0 if days else empty_months + 1
        year, month = (year + 1, 1) if month == 12 else (year, month + 1)


@functools.lru_cache(maxsize=4096)
def _month_days(day_expr: str, year: int, month: int) -> tuple[int, ...]:
    """Days of a month matching ``day_expr``; cached, as croniter steps are slow."""
    found: list[int] = []
    try:
        days = croniter(
            day_expr, datetime(year, month, 1) - _SECOND, max_years_between_matches=_MAX_YEARS
        )
        for day in days.all_next(datetime):
            if (day.year, day.month) != (year, month):
                break
            found.append(day.day)
    except (ValueError, OverflowError):  # the search ran past year 1 or 9999
        pass
    return tuple(found)


def _tuples_after(
    levels: Sequence[Sequence[int]], bound: tuple[int, ...]
) -> Iterator[tuple[int, ...]]:
    """The tuples of ``product(*levels)`` greater than ``bound``, in lexicographic order."""
    head, rest = levels[0], levels[1:]
    if not rest:
        yield from ((value,) for value in head[bisect_right(head, bound[0]) :])
        return
    index = bisect_left(head, bound[0])
    if index < len(head) and head[index] == bound[0]:
        yield from ((head[index], *tail) for tail in _tuples_after(rest, bound[1:]))
        index += 1
    for value in head[index:]:
        yield from ((value, *tail) for tail in itertools.product(*rest))
