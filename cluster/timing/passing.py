"""The slots a job passes without running them: every slot of its timing from its own slot
up to a time, each with why it is recorded skipped. Whatever moves a job past slots that
are due writes these records first, for the slot ledger leaves no slot without one
(docs/guarantees.md): an apply of a new timing over an outage
(``cluster.store.jobstore.dropped``), a pause (``Holds.record_owed``), a completion that
pauses the job after failed slots in a row (``node.pipeline.outcomes``). Pure: the caller
writes the list.

An outage may hold millions of slots. At most the newest ``MAX_RECORDED`` are listed; the
oldest listed names how many older ones were passed too and stands for them from the first
one passed (``runs.skipped_from``, as catch-up does). More than ``MAX_OUTAGE_SLOTS`` are not
walked: the newest are found from the clock back (``_tail_from``), and the count of the
older ones is then a lower bound.
"""

from __future__ import annotations

import itertools
from collections import deque
from collections.abc import Iterator
from datetime import datetime
from typing import NamedTuple

from cluster.timing.calendared import CalendarRule, Decision
from cluster.timing.instants import US
from cluster.timing.schedule import Schedule
from cluster.timing.timeline import MAX_OUTAGE_SLOTS, decisions

__all__ = ["MAX_RECORDED", "Passing", "Timing", "passed", "slots"]

MAX_RECORDED = 1000  # the newest passed slots listed; older ones are counted in a note

# A slot to record skipped, why, and the time its record stands for unlisted slots from.
Passing = tuple[datetime, str, datetime | None]


class Timing(NamedTuple):
    """A job's schedule and its calendar rule (windows, business days)."""

    schedule: Schedule
    rule: CalendarRule | None


def passed(
    timing: Timing, start: datetime, now: datetime, reason: str, keeper: Timing | None = None
) -> list[Passing]:
    """The slots of ``timing`` from ``start`` (the job's slot) due by ``now``, each with
    ``reason``, or the rule's for a slot its calendar or a window skips. ``start`` itself
    is passed even if it is no slot of the schedule (a trigger's instant, or a slot kept
    from before the timing's change, ``Schedule.starting``), and even with no slot after it.

    ``keeper``: the job keeps its slot under a new timing (held at its gate, deferred), and
    its claim decides the new timing's slots up to then by catch-up; only the old timing's
    slots after ``start`` that the new timing does not have are passed."""
    kept = keeper is not None
    decided = slots(keeper, start, now) if keeper is not None else set()
    found: deque[Passing] = deque(maxlen=MAX_RECORDED)
    count, first = 0, None

    def pass_by(slot: datetime, why: str) -> None:
        nonlocal count, first
        if slot not in decided and not (kept and slot <= start):
            found.append((slot, why, None))
            count += 1
            first = first or slot

    after, exact = start - US, True
    while True:
        walked = 0
        for decision in _decisions(timing, after, now):
            if walked == 0 and after < start and decision.slot != start and not kept:
                pass_by(start, reason)
            pass_by(decision.slot, reason if decision.runs else _rule_reason(decision.reason))
            walked, last = walked + 1, decision.slot
        if walked == 0 and after < start and not kept and start <= now:
            pass_by(start, reason)
        if walked < MAX_OUTAGE_SLOTS:
            break
        after = _tail_from(timing, after, last, now)  # the slots between: neither walked nor listed
        exact = exact and after == last
        decided |= slots(keeper, after, now) if keeper is not None else set()
    listed = list(found)
    if count > len(listed):
        slot, why, _ = listed[0]
        assert first is not None
        older = count - len(listed)
        counted = f"{older}" if exact else f"more than {older}"
        note = (
            f"{counted} older slots, from {first.isoformat()}, were skipped too and are not listed"
        )
        listed[0] = (slot, f"{why}; {note}", first)
    return listed


def slots(timing: Timing, after: datetime, now: datetime) -> set[datetime]:
    """The slots of ``timing`` in ``(after, now]``, run or skipped by its rule."""
    return {decision.slot for decision in _decisions(timing, after, now)}


def _decisions(timing: Timing, after: datetime, now: datetime) -> Iterator[Decision]:
    """The decisions after ``after``, up to ``now`` and at most ``MAX_OUTAGE_SLOTS`` (one
    for a one-off)."""
    for count, decision in enumerate(decisions(timing.schedule, timing.rule, after)):
        if decision.slot > now or count >= MAX_OUTAGE_SLOTS:
            return
        yield decision
        if timing.schedule.at is not None:
            return


def _tail_from(timing: Timing, start: datetime, walked: datetime, now: datetime) -> datetime:
    """Where to walk the newest slots of an outage from, past the ``MAX_OUTAGE_SLOTS``
    walked from ``start`` to ``walked``: an instant with at least ``MAX_RECORDED`` slots
    between it and ``now`` (or ``walked`` itself), found by doubling a stretch back from
    ``now`` that starts at twice the walked slots' mean spacing times ``MAX_RECORDED``."""
    spacing = max((walked - start) / MAX_OUTAGE_SLOTS, US)
    stretch = spacing * MAX_RECORDED * 2
    while now - stretch > walked:
        after = now - stretch
        newest = itertools.islice(_decisions(timing, after, now), MAX_RECORDED)
        if sum(1 for _ in newest) >= MAX_RECORDED:
            return after
        stretch *= 2
    return walked


def _rule_reason(reason: str | None) -> str:
    return reason or "skipped by the calendar"
