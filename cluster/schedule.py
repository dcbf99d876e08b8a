"""Schedules: when a job's slots fall, as pure math on aware datetimes (no I/O, no clock).

Owns the schedule grammar (5-field cron, 6-field cron with SECONDS FIRST, ``@yearly``-style
macros, ``@every <duration>``, ``@at <ISO 8601 time with offset>``: the one slot of a one-off
job) and the mapping from a job's local wall clock to UTC instants.
Every node must derive the same slots for the same job, so slots depend only on the schedule
and tzdata, never on a node's clock; ``@every`` slots are multiples of the interval since the
Unix epoch (UTC), whatever the zone.

croniter parses and validates cron text and finds the matching *days*; the times of day come
from its expanded second/minute/hour sets. We do not use croniter's own time-zone handling
(it fires ``30 2 * * *`` twice on Berlin's autumn change): each naive local wall time is mapped
to UTC here with zoneinfo's ``fold``:

* a repeated wall time fires once at its first occurrence (``dst_repeated="once"``) or at
  both (``"twice"``);
* a wall time skipped by a spring-forward gap fires once at the transition instant, the first
  valid instant after the gap (``dst_skipped="shift"``), or not at all (``"skip"``).

Slots come out strictly increasing; instants reached twice (several gap times shifted onto the
transition, or onto a slot) fire once.
"""

from __future__ import annotations

import functools
import itertools
import math
import re
from bisect import bisect_left, bisect_right
from collections import deque
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, Literal
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError, available_timezones

from croniter import CroniterBadDateError, CroniterError, croniter

from cluster.durations import parse_duration
from cluster.errors import InvalidInput

__all__ = [
    "MACROS",
    "MAX_EVERY_S",
    "MIN_EVERY_S",
    "DstRepeated",
    "DstSkipped",
    "Schedule",
    "parse_schedule",
]

DstRepeated = Literal["once", "twice"]
DstSkipped = Literal["shift", "skip"]

MACROS: dict[str, str] = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}
MIN_EVERY_S = 1.0
MAX_EVERY_S = 3650 * 86400.0  # ten years; far beyond any real job, far from datetime's limits
# croniter gives up on a day pattern after this many years; the sparsest satisfiable one
# ("0 0 * 2 1#5", a fifth Monday in February) recurs within 40 years.
_MAX_YEARS = 50
_PROBE_FROM = datetime(2000, 1, 1)
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_US = timedelta(microseconds=1)
_SECOND = timedelta(seconds=1)
_UTC_ZONE = ZoneInfo("UTC")  # ZoneInfo caches instances: the default zone takes a fast path
# Hashed (H) and random (R) fields would give every node different slots.
_NODE_DEPENDENT = re.compile(r"(?<![a-z])[hr](?![a-z])", re.IGNORECASE)
_CRON_ECHO = re.compile(r"^\[[^\]]*\]\s*(is not acceptable[,.]?\s*)?")
_FIELD_NUMBER = re.compile(r"in field ([0-5])")
_FIELD_NAMES = ("minute", "hour", "day-of-month", "month", "day-of-week", "second")
_FIELDS_HINT = "expected 5 fields (min hour dom mon dow) or 6 (sec min hour dom mon dow)"


@dataclass(frozen=True)
class Schedule:
    """A validated schedule; build one with ``parse_schedule`` (cached) or directly."""

    expr: str
    tz: str = "UTC"
    dst_repeated: DstRepeated = "once"
    dst_skipped: DstSkipped = "shift"
    _zone: ZoneInfo = field(init=False, repr=False, compare=False)
    _every_us: int | None = field(init=False, repr=False, compare=False)
    _day_expr: str = field(init=False, repr=False, compare=False)
    _times: tuple[tuple[int, ...], ...] = field(init=False, repr=False, compare=False)
    _at: datetime | None = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        expr, at = _one_off(_normalize_expr(self.expr))
        object.__setattr__(self, "_at", at)
        every_us, day_expr, times = _compile(expr) if at is None else (None, "", ())
        tz = self.tz.strip() if isinstance(self.tz, str) else self.tz
        zone = _zone(tz)
        _check_choice("dst_repeated", self.dst_repeated, ("once", "twice"))
        _check_choice("dst_skipped", self.dst_skipped, ("shift", "skip"))
        normalized = {"expr": expr, "tz": tz, "_zone": zone, "_every_us": every_us}
        for name, value in {**normalized, "_day_expr": day_expr, "_times": times}.items():
            object.__setattr__(self, name, value)  # frozen: set once, here

    @property
    def interval(self) -> timedelta | None:
        """The ``@every`` interval (slots are its multiples since the epoch); None for cron."""
        return None if self._every_us is None else self._every_us * _US

    @property
    def at(self) -> datetime | None:
        """The one slot of an ``@at`` schedule (UTC); None for a recurring one."""
        return self._at

    def next_after(self, after: datetime) -> datetime:
        """The first slot strictly after the aware datetime ``after``, in UTC."""
        for slot in self.iter_after(after):
            return slot
        raise InvalidInput("schedule", f"{self.expr!r} has no slot after {after.isoformat()}")

    def next_n(self, after: datetime, n: int) -> list[datetime]:
        """The first ``n`` slots strictly after ``after``, in UTC."""
        return list(itertools.islice(self.iter_after(after), n))

    def slots_between(
        self, start_inclusive: datetime, end_inclusive: datetime, limit: int
    ) -> list[datetime]:
        """At most ``limit`` slots ``s`` with ``start <= s <= end``, earliest first."""
        slots = self.iter_after(_utc(start_inclusive, "start_inclusive") - _US)
        end = _utc(end_inclusive, "end_inclusive")
        return list(itertools.islice(itertools.takewhile(lambda slot: slot <= end, slots), limit))

    def iter_after(self, after: datetime) -> Iterator[datetime]:
        """Every slot strictly after ``after``, in UTC, strictly increasing."""
        after = _utc(after, "after")
        if self._at is not None:
            return iter([self._at] if self._at > after else [])
        if self._every_us is not None:
            return self._every_after(after, self._every_us)
        return self._cron_after(after)

    def _every_after(self, after: datetime, every_us: int) -> Iterator[datetime]:
        index = (after - _EPOCH) // _US // every_us + 1
        while True:
            yield _EPOCH + index * every_us * _US
            index += 1

    def _cron_after(self, after: datetime) -> Iterator[datetime]:
        local = after.astimezone(self._zone)
        start = local.replace(tzinfo=None, fold=0)
        # Inside a repeated hour, wall times before ``start`` can still have a second
        # occurrence after ``after``: start one DST shift earlier and filter.
        shift = _offset(local.replace(fold=0)) - _offset(local.replace(fold=1))
        start -= abs(shift)
        last = after
        for slot in self._instants(start):
            if slot > last:
                last = slot
                yield slot

    def _instants(self, start: datetime) -> Iterator[datetime]:
        """UTC instants of the wall times strictly after naive ``start``, non-decreasing.

        Mapping each wall time to its first occurrence (or the gap's end) is monotonic, so only
        second occurrences ("twice") arrive out of order; they wait in ``later``.
        """
        zone = self._zone
        later: deque[datetime] = deque()
        gap_end: datetime | None = None
        days = _days_after(self._day_expr, self._times, start)
        if zone is _UTC_ZONE:
            for year, month, mday, times in days:
                for hour, minute, second in times:
                    yield datetime(year, month, mday, hour, minute, second, 0, UTC)
            return
        for year, month, mday, times in days:
            for hour, minute, second in times:
                local = datetime(year, month, mday, hour, minute, second, 0, zone)
                first_offset = zone.utcoffset(local)
                repeat_offset = zone.utcoffset(
                    datetime(year, month, mday, hour, minute, second, 0, zone, fold=1)
                )
                if first_offset == repeat_offset:
                    first = local.astimezone(UTC)
                    repeat = first
                else:
                    naive = datetime(year, month, mday, hour, minute, second, 0, UTC)
                    first = naive - _offset(local)
                    repeat = naive - _offset(local.replace(fold=1))
                if repeat < first:  # inside a spring-forward gap: (repeat, first] holds the change
                    if self.dst_skipped == "skip":
                        continue
                    if gap_end is None or not repeat < gap_end <= first:
                        gap_end = _transition(zone, repeat, first)
                    first = gap_end
                while later and later[0] <= first:
                    yield later.popleft()
                yield first
                if repeat > first and self.dst_repeated == "twice":
                    later.append(repeat)
        yield from later


def parse_schedule(
    expr: str,
    tz: str = "UTC",
    dst_repeated: DstRepeated = "once",
    dst_skipped: DstSkipped = "shift",
) -> Schedule:
    """Validate and build a schedule; ``InvalidInput`` names the bad field.

    Cached on the normalized arguments: the claim loop calls this once per job.
    """
    tz = tz.strip() if isinstance(tz, str) else tz
    return _parse_cached(_normalize_expr(expr), tz, dst_repeated, dst_skipped)


@functools.lru_cache(maxsize=4096)
def _parse_cached(
    expr: str, tz: str, dst_repeated: DstRepeated, dst_skipped: DstSkipped
) -> Schedule:
    return Schedule(expr, tz, dst_repeated, dst_skipped)


def _normalize_expr(expr: object) -> str:
    if not isinstance(expr, str):
        raise InvalidInput("schedule", f"must be a string, got {type(expr).__name__}")
    text = " ".join(expr.split())
    if not text:
        raise InvalidInput("schedule", f"is empty; {_FIELDS_HINT}, a macro or @every <duration>")
    if text.startswith("@"):
        head, _, rest = text.partition(" ")
        text = f"{head.lower()} {rest}".rstrip()
    return text


def _one_off(expr: str) -> tuple[str, datetime | None]:
    """(normalized expression, its instant) of ``@at <ISO 8601 with offset>``, else
    (expr, None). The text keeps the offset it was given; the instant is UTC."""
    if expr.split(" ", 1)[0] != "@at":
        return expr, None
    text = expr[len("@at") :].strip()
    try:
        moment = datetime.fromisoformat(text)
    except ValueError as exc:
        raise InvalidInput("schedule", f"@at needs an ISO 8601 time, got {text!r}") from exc
    if moment.tzinfo is None or moment.utcoffset() is None:
        example = "2026-01-01T09:00:00+01:00"
        raise InvalidInput("schedule", f"@at needs a time with a UTC offset, e.g. {example}")
    return f"@at {moment.isoformat()}", moment.astimezone(UTC)


def _check_choice(name: str, value: object, choices: tuple[str, ...]) -> None:
    if value not in choices:
        raise InvalidInput(name, f"must be one of {', '.join(choices)}, got {value!r}")


@functools.cache
def _iana_names() -> frozenset[str]:
    host_dependent = {"localtime", "posixrules", "Factory"}
    return frozenset(available_timezones() - host_dependent) | {"UTC"}


def _zone(tz: object) -> ZoneInfo:
    if not isinstance(tz, str) or not tz:
        raise InvalidInput("tz", f"expected an IANA time zone like Europe/Berlin, got {tz!r}")
    # Only canonical IANA names: `localtime`, `posixrules`, `posix/...` or `right/...` would
    # mean different things on different hosts, and every node must compute the same slots.
    # Listing the names walks the whole tz database, so the default zone skips it.
    if tz != "UTC" and tz not in _iana_names():
        raise InvalidInput("tz", f"unknown time zone {tz!r}; use an IANA name like Europe/Berlin")
    try:
        return ZoneInfo(tz)
    except (ZoneInfoNotFoundError, ValueError, OSError) as exc:
        raise InvalidInput("tz", f"unknown time zone {tz!r}") from exc


def _compile(expr: str) -> tuple[int | None, str, tuple[tuple[int, ...], ...]]:
    """(every_us, day_expr, (hours, minutes, seconds)) for a normalized expression."""
    if expr.split(" ", 1)[0] == "@every":
        seconds = parse_duration(expr[len("@every") :], field="schedule")
        if seconds < MIN_EVERY_S:
            raise InvalidInput("schedule", f"@every interval must be at least 1s, got {expr!r}")
        if seconds > MAX_EVERY_S:
            raise InvalidInput("schedule", f"@every interval must be at most 3650d, got {expr!r}")
        return round(seconds * 1_000_000), "", ()
    text = MACROS.get(expr, expr)
    if text.startswith("@"):
        known = ", ".join([*MACROS, "@every <duration>", "@at <ISO time>"])
        raise InvalidInput("schedule", f"unknown macro {expr!r}; expected one of {known}")
    fields = text.split(" ")
    if len(fields) not in (5, 6):
        raise InvalidInput("schedule", f"{_FIELDS_HINT}, got {len(fields)} in {expr!r}")
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
    return None, day_expr, times


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


def _days_after(
    day_expr: str, times: tuple[tuple[int, ...], ...], start: datetime
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


def _transition(zone: ZoneInfo, before: datetime, after: datetime) -> datetime:
    """The instant in ``(before, after]`` where ``zone``'s offset changes (tzdata: whole s)."""
    low, high = math.floor(before.timestamp()), math.ceil(after.timestamp())
    low_offset = datetime.fromtimestamp(low, zone).utcoffset()
    while high - low > 1:
        middle = (low + high) // 2
        if datetime.fromtimestamp(middle, zone).utcoffset() == low_offset:
            low = middle
        else:
            high = middle
    return datetime.fromtimestamp(high, UTC)


def _offset(local: datetime) -> timedelta:
    offset = local.utcoffset()
    assert offset is not None, "aware by construction"
    return offset


def _utc(moment: datetime, name: str) -> datetime:
    if moment.tzinfo is None or moment.utcoffset() is None:
        raise InvalidInput(name, f"must be a timezone-aware datetime, got {moment!r}")
    return moment.astimezone(UTC)
