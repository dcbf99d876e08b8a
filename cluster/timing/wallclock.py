"""A job's wall clock: its time zone by name, and its local wall times as UTC instants.

Owns which zone names are accepted (canonical IANA names only: ``localtime``,
``posixrules``, ``posix/...`` or ``right/...`` would mean different things on different
hosts, and every node must compute the same slots) and the mapping of each naive local wall
time to UTC with zoneinfo's ``fold``, the DST rules ``cluster.timing.schedule`` documents:
a repeated wall time fires at its first occurrence or at both (``twice``); one skipped by a
spring-forward gap fires at the first valid instant after the gap, or not at all
(``skip``). Kept apart from the schedule grammar because calendars
(``cluster.timing.calendared``) move slots onto other days' wall times by the same rules.
"""

from __future__ import annotations

import functools
import math
from collections import deque
from collections.abc import Iterable, Iterator
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError, available_timezones

from cluster.errors import InvalidInput

__all__ = ["UTC_ZONE", "Days", "offset", "parse_zone", "transition", "wall_instants"]

# Local dates (year, month, day) with the wall times (hour, minute, second) of each, in order.
Days = Iterable[tuple[int, int, int, Iterable[tuple[int, ...]]]]

UTC_ZONE = ZoneInfo("UTC")  # ZoneInfo caches instances: the default zone takes a fast path


@functools.cache
def _iana_names() -> frozenset[str]:
    host_dependent = {"localtime", "posixrules", "Factory"}
    return frozenset(available_timezones() - host_dependent) | {"UTC"}


def parse_zone(tz: object) -> ZoneInfo:
    """The zone named ``tz``; ``InvalidInput`` on ``tz`` for any other name."""
    if not isinstance(tz, str) or not tz:
        raise InvalidInput("tz", f"expected an IANA time zone like Europe/Berlin, got {tz!r}")
    # Listing the names walks the whole tz database, so the default zone skips it.
    if tz != "UTC" and tz not in _iana_names():
        raise InvalidInput("tz", f"unknown time zone {tz!r}; use an IANA name like Europe/Berlin")
    try:
        return ZoneInfo(tz)
    except (ZoneInfoNotFoundError, ValueError, OSError) as exc:
        raise InvalidInput("tz", f"unknown time zone {tz!r}") from exc


def wall_instants(zone: ZoneInfo, days: Days, *, twice: bool, skip: bool) -> Iterator[datetime]:
    """UTC instants of the wall times of ``days`` in ``zone``, non-decreasing: a repeated
    wall time at its first occurrence (and its second if ``twice``), one inside a gap at the
    gap's end (none if ``skip``).

    Mapping each wall time to its first occurrence (or the gap's end) is monotonic, so only
    second occurrences ("twice") arrive out of order; they wait in ``later``.
    """
    later: deque[datetime] = deque()
    gap_end: datetime | None = None
    if zone is UTC_ZONE:
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
                first = naive - offset(local)
                repeat = naive - offset(local.replace(fold=1))
            if repeat < first:  # inside a spring-forward gap: (repeat, first] holds the change
                if skip:
                    continue
                if gap_end is None or not repeat < gap_end <= first:
                    gap_end = transition(zone, repeat, first)
                first = gap_end
            while later and later[0] <= first:
                yield later.popleft()
            yield first
            if repeat > first and twice:
                later.append(repeat)
    yield from later


def transition(zone: ZoneInfo, before: datetime, after: datetime) -> datetime:
    """The instant in ``(before, after]`` where ``zone``'s offset changes (tzdata: whole s):
    the first valid instant after a spring-forward gap."""
    low, high = math.floor(before.timestamp()), math.ceil(after.timestamp())
    low_offset = datetime.fromtimestamp(low, zone).utcoffset()
    while high - low > 1:
        middle = (low + high) // 2
        if datetime.fromtimestamp(middle, zone).utcoffset() == low_offset:
            low = middle
        else:
            high = middle
    return datetime.fromtimestamp(high, UTC)


def offset(local: datetime) -> timedelta:
    """The UTC offset of the aware ``local``."""
    found = local.utcoffset()
    assert found is not None, "aware by construction"
    return found
