"""A job's definitions over time, pure: the spans its revisions put in force (schedule,
pause, ``pause --until``), and the slots each expects. What the slot ledger
(``cluster.jobs.ledger``) holds a job's records against (docs/design/audit.md).
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from cluster.errors import InvalidInput
from cluster.timing.instants import US
from cluster.timing.schedule import ENDED, Schedule, parse_schedule

__all__ = ["Span", "spans_of"]


@dataclass(frozen=True)
class Span:
    """A definition in force from ``start`` (a revision's time) until ``end`` (None: still)."""

    start: datetime
    end: datetime | None
    schedule: Schedule | None  # None: no clock of its own (chained, each-zone parent)
    paused: bool = False
    paused_until: datetime | None = None  # `pause --until`: its slots before are not run
    max_runs: int | None = None  # the job is done after this many runs
    # Its schedule or zone differs from the span's before: a job done after its max_runs
    # is idle again from here (upsert_jobs) until its next run.
    new_timing: bool = False

    def held(self) -> tuple[datetime, datetime] | None:
        """The slots a ``pause --until`` passed over: those after ``start`` and before
        ``limit`` (exclusive) that this span expects, or None."""
        if self.paused_until is None:
            return None
        limit = self.paused_until if self.end is None else min(self.paused_until, self.end + US)
        return (self.start, limit) if limit > self.start else None

    def paused_over(self, slot: datetime) -> bool:
        """Whether this is a plain pause over ``slot``, one of its schedule's slots that
        :meth:`slots` does not expect (a ``skip-next`` may have recorded it before)."""
        if not self.paused or self.schedule is None or slot <= self.start:
            return False
        if self.end is not None and slot > self.end:
            return False
        return next(self.schedule.iter_after(slot - US), None) == slot

    def slots(self, start: datetime, stop: datetime) -> Iterator[datetime]:
        """The slots this definition expects in ``[start, stop)``: its schedule's, strictly
        after it began and up to the instant the next began (none while paused)."""
        if self.paused or self.schedule is None:
            return iter(())
        # A slot at the very instant of an edit belongs to the definition before it.
        limit = min(stop, ENDED) if self.end is None else min(stop, self.end + US)
        slots = self.schedule.iter_after(max(self.start, start - US))
        return itertools.takewhile(lambda s: s < limit, slots)


def spans_of(
    revisions: Sequence[tuple[datetime, str, Mapping[str, Any]]],
) -> tuple[Span, ...]:
    """The spans of one job from its revisions (time, change, definition), oldest first.
    A definition whose schedule no longer parses expects nothing (a span without clock)."""
    found: list[Span] = []
    timing = None
    for index, (at, change, definition) in enumerate(revisions):
        if change == "removed":
            break
        end = revisions[index + 1][0] if index + 1 < len(revisions) else None
        paused = bool(definition.get("paused", False))
        before, timing = timing, (definition.get("schedule"), definition.get("tz") or "UTC")
        found.append(
            Span(
                at,
                end,
                _schedule(definition),
                paused,
                _until(definition),
                definition.get("max_runs"),
                before is not None and timing != before,
            )
        )
    return tuple(found)


def _until(definition: Mapping[str, Any]) -> datetime | None:
    """A revision's ``paused_until`` (JSON text; none before migration until_revisions)."""
    until = definition.get("paused_until")
    if until is None or isinstance(until, datetime):
        return until
    return datetime.fromisoformat(str(until))


def _schedule(definition: Mapping[str, Any]) -> Schedule | None:
    if definition.get("each_zone"):
        return None  # a parent never runs: its children do, one per zone
    try:
        schedule = parse_schedule(
            str(definition.get("schedule", "")),
            str(definition.get("tz") or "UTC"),
            definition.get("dst_repeated") or "once",
            definition.get("dst_skipped") or "shift",
        )
    except InvalidInput:
        return None
    return None if schedule.chain else schedule
