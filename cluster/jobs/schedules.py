"""A job's schedule field as users give it: one expression, or several (``schedules:`` in a
job file, ``--schedule`` given more than once, a list in the API and decorators), each
with an optional payload, ``start`` and ``end``; and ``max_runs``.

Several schedules become one ``@schedules [...]`` text (``cluster.timing.entries``); two
entries that share an instant but would run it with different payloads are refused here,
naming the instant, since the union keeps one run per instant (docs/design/schedules.md).
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Iterator, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from cluster.errors import InvalidInput
from cluster.jobs.fields import count_field, parse_payload
from cluster.timing.entries import (
    Entry,
    entries_text,
    entry_of,
    is_union,
    items_of,
    parse_entries,
)
from cluster.timing.instants import US
from cluster.timing.schedule import ENDED, Schedule

__all__ = ["check_collisions", "check_max_runs", "effective_payload", "schedule_text"]

# Union slots walked at apply to find an instant two entries share with different payloads.
PROBE_SLOTS = 5000


def schedule_text(value: object) -> str:
    """The stored schedule text of one expression or a list of entries (strings or
    mappings with ``schedule``, ``payload``, ``start``, ``end``)."""
    if isinstance(value, str):
        if is_union(value.strip()):  # a stored text (JobSpec.validated): checked again
            value = [entry.to_json() for entry in parse_entries(value.strip())]
        else:
            return value
    if isinstance(value, Mapping) or not isinstance(value, Sequence):
        raise InvalidInput("schedules", "must be a schedule or a list of schedules")
    items = items_of(list(value))
    entries = []
    for position, item in enumerate(items, 1):
        entry = entry_of(item, position)
        if entry.payload is not None:
            payload = _payload(entry.payload, f"schedules[{position}].payload")
            entry = Entry(entry.expr, payload, entry.start, entry.end)
        entries.append(entry)
    if len(entries) == 1 and entries[0] == Entry(entries[0].expr):
        return entries[0].expr  # one plain schedule: stored as such, the fast path
    return entries_text(entries)


def _payload(value: Mapping[str, Any], field_name: str) -> dict[str, Any]:
    try:
        return parse_payload(value)
    except InvalidInput as exc:
        raise InvalidInput(field_name, exc.problem) from exc


def effective_payload(payload: Mapping[str, Any], entry: Entry | None) -> dict[str, Any]:
    """The payload a slot of ``entry`` runs with: the job's, with the entry's keys over it."""
    if entry is None or not entry.payload:
        return dict(payload)
    return {**payload, **entry.payload}


def check_collisions(schedule: Schedule, payload: Mapping[str, Any], now: datetime) -> None:
    """``InvalidInput`` naming the first instant (over the next ``PROBE_SLOTS`` slots from
    ``now`` or the entries' start) that two entries share with different payloads."""
    entries = schedule.entries
    if len({repr(sorted(effective_payload(payload, e).items())) for e in entries}) < 2:
        return
    members = [
        Schedule(e.expr, schedule.tz, schedule.dst_repeated, schedule.dst_skipped) for e in entries
    ]
    starts = [e.start for e in entries if e.start is not None]
    after = max(now, min(starts)) if len(starts) == len(entries) else now
    walks = [_tagged(m, e, i, after) for i, (m, e) in enumerate(zip(members, entries, strict=True))]
    previous: tuple[datetime, int] | None = None
    for slot, index in itertools.islice(heapq.merge(*walks), PROBE_SLOTS):
        if previous is not None and previous[0] == slot:
            first, second = entries[previous[1]], entries[index]
            if effective_payload(payload, first) != effective_payload(payload, second):
                raise InvalidInput(
                    "schedules",
                    f"entries {previous[1] + 1} and {index + 1} both have the slot "
                    f"{slot.astimezone(UTC).isoformat()} with different payloads",
                )
            continue
        previous = (slot, index)


def _tagged(
    member: Schedule, entry: Entry, index: int, after: datetime
) -> Iterator[tuple[datetime, int]]:
    start = after if entry.start is None else max(after, entry.start - US)
    for slot in member.iter_after(start):
        if slot >= ENDED or (entry.end is not None and slot >= entry.end):
            return
        yield slot, index


def check_max_runs(value: object, schedule: Schedule, overlap: str, each_zone: bool) -> int | None:
    """``max_runs``: the job is done after this many runs; None: no limit."""
    if value is None:
        return None
    count = count_field(value, "max_runs", 1)
    if schedule.at is not None:
        raise InvalidInput("max_runs", "a one-off (@at) job runs once already")
    if overlap == "allow":
        raise InvalidInput("max_runs", "does not apply to an --overlap allow job")
    if each_zone:
        raise InvalidInput("max_runs", "does not apply to an --each-zone job")
    return count
