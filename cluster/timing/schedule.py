"""Schedules: when a job's slots fall, as pure math on aware datetimes (no I/O, no clock).

Owns the schedule grammar's top level (``@every <duration>``, ``@at <ISO 8601 time with
offset>``: the one slot of a one-off job; cron text and macros go to
``cluster.timing.cron``) and the walk of a schedule's slots; time zone names and the mapping
from a job's local wall clock to UTC instants are ``cluster.timing.wallclock``'s. Every
node must derive the same slots for the same job, so slots depend only on the schedule and
tzdata, never on a node's clock; ``@every`` slots are multiples of the interval since the
Unix epoch (UTC), whatever the zone.

``cluster.timing.cron`` validates cron text (5 fields, or 6 with SECONDS FIRST) and
``@yearly``-style macros through croniter, and walks the matching days and times of day in
local wall time. We do not use croniter's own time-zone handling (it fires ``30 2 * * *``
twice on Berlin's autumn change): each naive local wall time is mapped to UTC with
zoneinfo's ``fold`` (``cluster.timing.wallclock``):

* a repeated wall time fires once at its first occurrence (``dst_repeated="once"``) or at
  both (``"twice"``);
* a wall time skipped by a spring-forward gap fires once at the transition instant, the first
  valid instant after the gap (``dst_skipped="shift"``), or not at all (``"skip"``).

Slots come out strictly increasing; instants reached twice (several gap times shifted onto the
transition, or onto a slot) fire once.

A job with several schedules has the expression ``@schedules [...]``
(``cluster.timing.entries``): its slots are the union of its entries' slots, each bounded by
the entry's ``start`` and ``end``, an instant shared by two entries once (it belongs to the
first). When every entry ends, the walk ends with ``ENDED``, the instant a finished job is
never due again.

``@after:A[,B]`` is a chained job's schedule: it has no clock (no slot of its own); each
success of its upstreams' slot makes one of its slots (docs/design/chains.md).
"""

from __future__ import annotations

import copy
import functools
import heapq
import itertools
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Literal
from zoneinfo import ZoneInfo

from cluster.errors import InvalidInput
from cluster.timing.cron import FIELDS_HINT, MACROS, Times, compile_cron, days_after
from cluster.timing.durations import parse_duration
from cluster.timing.entries import Entry, entries_text, is_union, parse_entries
from cluster.timing.instants import US, US_PER_S, from_micros, micros
from cluster.timing.wallclock import offset, parse_zone, wall_instants

__all__ = [
    "CHAINED_NEXT",
    "CHAIN_PREFIX",
    "ENDED",
    "MACROS",  # defined with the rest of the cron grammar, in cluster.timing.cron
    "MAX_EVERY_S",
    "MIN_EVERY_S",
    "DstRepeated",
    "DstSkipped",
    "Schedule",
    "parse_schedule",
]

DstRepeated = Literal["once", "twice"]
DstSkipped = Literal["shift", "skip"]

MIN_EVERY_S = 1.0
MAX_EVERY_S = 3650 * 86400.0  # ten years; far beyond any real job, far from datetime's limits
# After the last slot of a schedule whose entries all end (records.NEVER: never due again).
ENDED = datetime(9999, 1, 1, tzinfo=UTC)
# A chained job's "next slot" after a run: take the next released slot (migration 023).
CHAINED_NEXT = datetime(9998, 1, 1, tzinfo=UTC)
CHAIN_PREFIX = "@after:"


@dataclass(frozen=True)
class Schedule:
    """A validated schedule; build one with ``parse_schedule`` (cached) or directly."""

    expr: str
    tz: str = "UTC"
    dst_repeated: DstRepeated = "once"
    dst_skipped: DstSkipped = "shift"
    # No slot at or before this instant (``starting``): a job's timing after it was written.
    since: datetime | None = None
    _zone: ZoneInfo = field(init=False, repr=False, compare=False)
    _every_us: int | None = field(init=False, repr=False, compare=False)
    _day_expr: str = field(init=False, repr=False, compare=False)
    _times: Times = field(init=False, repr=False, compare=False)
    _at: datetime | None = field(init=False, repr=False, compare=False)
    _members: tuple[tuple[Schedule, Entry], ...] = field(init=False, repr=False, compare=False)
    _chain: tuple[str, ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        tz = self.tz.strip() if isinstance(self.tz, str) else self.tz
        zone = parse_zone(tz)
        _check_choice("dst_repeated", self.dst_repeated, ("once", "twice"))
        _check_choice("dst_skipped", self.dst_skipped, ("shift", "skip"))
        expr = _normalize_expr(self.expr)
        members: tuple[tuple[Schedule, Entry], ...] = ()
        times: Times = ()
        chain: tuple[str, ...] = ()
        if expr.startswith(CHAIN_PREFIX):
            chain = _chain_names(expr)
            expr = CHAIN_PREFIX + ",".join(chain)
            at, every_us, day_expr = None, None, ""
        elif is_union(expr):
            members = _union_members(expr, tz, self.dst_repeated, self.dst_skipped)
            expr = entries_text([entry for _, entry in members])
            at, every_us, day_expr, times = None, None, "", ()
        else:
            expr, at = _one_off(expr)
            every_us, day_expr, times = _compile(expr) if at is None else (None, "", ())
        object.__setattr__(self, "_at", at)
        object.__setattr__(self, "_members", members)
        object.__setattr__(self, "_chain", chain)
        normalized = {"expr": expr, "tz": tz, "_zone": zone, "_every_us": every_us}
        for name, value in {**normalized, "_day_expr": day_expr, "_times": times}.items():
            object.__setattr__(self, name, value)  # frozen: set once, here

    def starting(self, since: datetime | None) -> Schedule:
        """This schedule with no slot at or before ``since`` (itself for None). A job whose
        timing changed walks on from a slot kept from before the change to its new timing's
        first slot after the change, not to slots of the new timing that were never its own
        (docs/design/time.md, "A new timing over a kept slot"). As ``pulse audit`` reads a
        revision: the slots of a timing written at t are those after t."""
        if since is None or since == self.since:
            return self
        bounded = copy.copy(self)
        object.__setattr__(bounded, "since", _utc(since, "since"))  # frozen: set once, here
        return bounded

    @property
    def chain(self) -> tuple[str, ...]:
        """The upstreams of a chained (``@after:``) schedule, sorted; () for a clock."""
        return self._chain

    @property
    def entries(self) -> tuple[Entry, ...]:
        """The entries of a job with several schedules; () for one schedule."""
        return tuple(entry for _, entry in self._members)

    @property
    def ends(self) -> bool:
        """Whether the slots run out: every entry ends (or is one ``@at`` slot)."""
        return bool(self._members) and all(
            entry.end is not None or member.at is not None for member, entry in self._members
        )

    def entry_at(self, slot: datetime) -> int | None:
        """The index of the entry ``slot`` belongs to (the first with a slot there); None
        for one schedule or an instant that is no entry's slot."""
        for index, (member, entry) in enumerate(self._members):
            if entry.covers(slot) and next(member.iter_after(slot - US), None) == slot:
                return index
        return None

    @property
    def interval(self) -> timedelta | None:
        """The ``@every`` interval (slots are its multiples since the epoch); None for cron."""
        return None if self._every_us is None else self._every_us * US

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
        slots = self.iter_after(_utc(start_inclusive, "start_inclusive") - US)
        end = _utc(end_inclusive, "end_inclusive")
        return list(itertools.islice(itertools.takewhile(lambda slot: slot <= end, slots), limit))

    def iter_after(self, after: datetime) -> Iterator[datetime]:
        """Every slot strictly after ``after``, in UTC, strictly increasing."""
        after = _utc(after, "after")
        if self.since is not None and after < self.since:
            after = self.since
        if self._chain:
            return iter(())  # no clock: its slots are its upstreams' successes
        if self._members:
            return self._union_after(after)
        if self._at is not None:
            return iter([self._at] if self._at > after else [])
        if self._every_us is not None:
            return self._every_after(after, self._every_us)
        return self._cron_after(after)

    def _union_after(self, after: datetime) -> Iterator[datetime]:
        walks = [_bounded(member, entry, after) for member, entry in self._members]
        last = after
        for slot in heapq.merge(*walks):
            if slot > last:
                last = slot
                yield slot
        if self.ends:
            yield ENDED

    def _every_after(self, after: datetime, every_us: int) -> Iterator[datetime]:
        index = micros(after) // every_us + 1
        while True:
            yield from_micros(index * every_us)
            index += 1

    def _cron_after(self, after: datetime) -> Iterator[datetime]:
        local = after.astimezone(self._zone)
        start = local.replace(tzinfo=None, fold=0)
        # Inside a repeated hour, wall times before ``start`` can still have a second
        # occurrence after ``after``: start one DST shift earlier and filter.
        shift = offset(local.replace(fold=0)) - offset(local.replace(fold=1))
        start -= abs(shift)
        last = after
        days = days_after(self._day_expr, self._times, start)
        twice, skip = self.dst_repeated == "twice", self.dst_skipped == "skip"
        for slot in wall_instants(self._zone, days, twice=twice, skip=skip):
            if slot > last:
                last = slot
                yield slot


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


def _chain_names(expr: str) -> tuple[str, ...]:
    names = {name.strip() for name in expr[len(CHAIN_PREFIX) :].split(",")}
    if not names or "" in names:
        raise InvalidInput(
            "schedule", f"{CHAIN_PREFIX}A[,B] needs upstream job names, got {expr!r}"
        )
    return tuple(sorted(names))


def _bounded(member: Schedule, entry: Entry, after: datetime) -> Iterator[datetime]:
    """The slots of one entry after ``after``, inside its ``start`` and ``end``."""
    if entry.start is not None and entry.start > after:
        after = entry.start - US
    slots = member.iter_after(after)
    return slots if entry.end is None else itertools.takewhile(lambda s: s < entry.end, slots)  # type: ignore[operator]


def _union_members(
    expr: str, tz: str, dst_repeated: DstRepeated, dst_skipped: DstSkipped
) -> tuple[tuple[Schedule, Entry], ...]:
    found = []
    for position, entry in enumerate(parse_entries(expr), 1):
        if is_union(entry.expr.strip()):
            raise InvalidInput(f"schedules[{position}]", "must be one schedule expression")
        member = _parse_cached(_normalize_expr(entry.expr), tz, dst_repeated, dst_skipped)
        found.append((member, Entry(member.expr, entry.payload, entry.start, entry.end)))
    return tuple(found)


def _normalize_expr(expr: object) -> str:
    if not isinstance(expr, str):
        raise InvalidInput("schedule", f"must be a string, got {type(expr).__name__}")
    if is_union(expr):
        return expr  # JSON text: its strings keep their spaces
    text = " ".join(expr.split())
    if not text:
        raise InvalidInput("schedule", f"is empty; {FIELDS_HINT}, a macro or @every <duration>")
    if text[: len(CHAIN_PREFIX)].lower() == CHAIN_PREFIX:
        return CHAIN_PREFIX + text[len(CHAIN_PREFIX) :]  # job names keep their case
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


def _compile(expr: str) -> tuple[int | None, str, Times]:
    """(every_us, day_expr, (hours, minutes, seconds)) for a normalized expression."""
    if expr.split(" ", 1)[0] == "@every":
        seconds = parse_duration(expr[len("@every") :], field="schedule")
        if seconds < MIN_EVERY_S:
            raise InvalidInput("schedule", f"@every interval must be at least 1s, got {expr!r}")
        if seconds > MAX_EVERY_S:
            raise InvalidInput("schedule", f"@every interval must be at most 3650d, got {expr!r}")
        return round(seconds * US_PER_S), "", ()
    return None, *compile_cron(expr)


def _utc(moment: datetime, name: str) -> datetime:
    if moment.tzinfo is None or moment.utcoffset() is None:
        raise InvalidInput(name, f"must be a timezone-aware datetime, got {moment!r}")
    return moment.astimezone(UTC)
