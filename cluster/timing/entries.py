"""Several schedules per job: the entries of ``schedules:`` (an expression, and optionally
a payload, a ``start`` and an ``end``) and the one text that stores them.

A job with several schedules keeps them in its ``schedule`` column as
``@schedules <JSON list>``, so every node derives its slots (the union of the entries'
slots, duplicates removed) from the claimed row alone, like any other schedule: the claim
returns nothing new and a job with one schedule pays nothing (docs/design/schedules.md).
``cluster.timing.schedule`` walks the union; this module only reads and writes the text.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from cluster.errors import InvalidInput

__all__ = ["PREFIX", "Entry", "entries_text", "is_union", "parse_entries", "parse_moment"]

PREFIX = "@schedules"
MAX_ENTRIES = 64


@dataclass(frozen=True)
class Entry:
    """One schedule of a job: slots of ``expr`` with ``start <= slot < end``."""

    expr: str
    payload: Mapping[str, Any] | None = None  # merged over the job's payload for its slots
    start: datetime | None = None
    end: datetime | None = None

    def covers(self, slot: datetime) -> bool:
        return (self.start is None or slot >= self.start) and (self.end is None or slot < self.end)

    def to_json(self) -> dict[str, Any]:
        found: dict[str, Any] = {"schedule": self.expr}
        if self.payload:
            found["payload"] = dict(self.payload)
        if self.start is not None:
            found["start"] = self.start.isoformat()
        if self.end is not None:
            found["end"] = self.end.isoformat()
        return found


def is_union(expr: str) -> bool:
    return expr.startswith(PREFIX)


def entries_text(entries: Sequence[Entry]) -> str:
    """The stored text of ``entries`` (their order kept: the first entry owns a shared slot)."""
    body = json.dumps(
        [e.to_json() for e in entries], ensure_ascii=False, sort_keys=True, separators=(",", ":")
    )
    return f"{PREFIX} {body}"


def parse_entries(text: str) -> tuple[Entry, ...]:
    """The entries of a stored ``@schedules [...]`` text; ``InvalidInput`` naming
    ``schedules`` when it is not one."""
    body = text[len(PREFIX) :].strip()
    try:
        items = json.loads(body)
    except (json.JSONDecodeError, RecursionError) as exc:
        raise InvalidInput("schedules", "is not a JSON list of schedules") from exc
    return tuple(entry_of(item, position) for position, item in enumerate(items_of(items), 1))


def items_of(items: object) -> list[object]:
    if not isinstance(items, list) or not items:
        raise InvalidInput("schedules", "must be a non-empty list of schedules")
    if len(items) > MAX_ENTRIES:
        raise InvalidInput("schedules", f"at most {MAX_ENTRIES} schedules per job")
    return items


def entry_of(item: object, position: int) -> Entry:
    """One entry from a job file's item: an expression, or a mapping with ``schedule`` and
    optional ``payload`` (a mapping; checked by the caller), ``start``, ``end``."""
    where = f"schedules[{position}]"
    if isinstance(item, str):
        return Entry(item)
    if not isinstance(item, Mapping):
        raise InvalidInput(where, "must be a schedule or a mapping with a 'schedule' key")
    unknown = sorted(set(item) - {"schedule", "payload", "start", "end"})
    if unknown:
        raise InvalidInput(f"{where}.{unknown[0]}", "unknown key")
    expr = item.get("schedule")
    if not isinstance(expr, str):
        raise InvalidInput(f"{where}.schedule", "missing (a schedule expression)")
    payload = item.get("payload")
    if payload is not None and not isinstance(payload, Mapping):
        raise InvalidInput(f"{where}.payload", "must be a JSON object")
    start = parse_moment(item.get("start"), f"{where}.start")
    end = parse_moment(item.get("end"), f"{where}.end")
    if start is not None and end is not None and end <= start:
        raise InvalidInput(f"{where}.end", f"{end.isoformat()} is not after start")
    return Entry(expr, payload or None, start, end)


def parse_moment(value: object, field_name: str) -> datetime | None:
    """An ISO 8601 time with a UTC offset (or an aware datetime), in UTC; None stays None."""
    if value is None:
        return None
    if isinstance(value, datetime):
        moment = value
    elif isinstance(value, str):
        try:
            moment = datetime.fromisoformat(value.strip())
        except ValueError as exc:
            raise InvalidInput(field_name, f"{value!r} is not an ISO 8601 time") from exc
    else:
        raise InvalidInput(field_name, "must be an ISO 8601 time with a UTC offset")
    if moment.tzinfo is None or moment.utcoffset() is None:
        raise InvalidInput(field_name, "needs a UTC offset, e.g. 2027-01-01T00:00:00+00:00")
    return moment.astimezone(UTC)
