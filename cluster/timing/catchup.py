"""Catch-up: what to do with slots that came due while nobody ran them (pure, no I/O).

Owns the missed-slot policy (invariant L1, no silent loss; see ``node/__init__.py``): every
due slot is either run or returned here as skipped, so the store can record it with its
reason.

* ``skip``: due slots later than the grace are skipped; the job resumes at the first slot
  still within grace, or at the first future slot.
* ``once`` (default): all due slots but the newest are skipped; the newest runs now.
* ``backfill``: due slots run in order, at most ``max_backfill`` of them (the newest); the
  older ones beyond the cap are skipped.

A plan is a cut: the slots in ``[first_due, next_slot)`` are skipped, ``next_slot`` runs next.
Outages can be long, so the plan never holds more than ``record_limit`` datetimes: it lists
the most recent skipped slots and counts the rest in ``skipped_more``. ``@every`` slots are
arithmetic and planned in O(1); cron slots are walked one by one, so a long outage of a
seconds-level cron costs time in proportion to the slots it missed.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Literal

from cluster.errors import InvalidInput
from cluster.timing.instants import US, from_micros, micros
from cluster.timing.schedule import Schedule

__all__ = [
    "DEFAULT_CATCH_UP",
    "DEFAULT_GRACE_S",
    "DEFAULT_MAX_BACKFILL",
    "DEFAULT_RECORD_LIMIT",
    "POLICIES",
    "CatchUp",
    "CatchUpPlan",
    "CatchUpPolicy",
    "parse_catch_up",
    "plan_catchup",
]

CatchUpPolicy = Literal["skip", "once", "backfill"]
POLICIES: tuple[CatchUpPolicy, ...] = ("skip", "once", "backfill")
# A job's defaults (cluster.jobs.fields names them among the other fields').
DEFAULT_CATCH_UP: CatchUpPolicy = "once"
DEFAULT_GRACE_S = 60.0
DEFAULT_MAX_BACKFILL = 100
DEFAULT_RECORD_LIMIT = 1000


def parse_catch_up(policy: str) -> CatchUpPolicy:
    """Validate a policy name (case and surrounding blanks ignored)."""
    name = policy.strip().lower() if isinstance(policy, str) else policy
    if name not in POLICIES:
        raise InvalidInput("catch_up", f"must be one of {', '.join(POLICIES)}, got {policy!r}")
    return name


@dataclass(frozen=True)
class CatchUp:
    """A job's missed-slot policy; validated on construction."""

    policy: CatchUpPolicy = DEFAULT_CATCH_UP
    grace_s: float = DEFAULT_GRACE_S
    max_backfill: int = DEFAULT_MAX_BACKFILL

    def __post_init__(self) -> None:
        object.__setattr__(self, "policy", parse_catch_up(self.policy))
        grace = self.grace_s
        if (
            isinstance(grace, bool)
            or not isinstance(grace, int | float)
            or not math.isfinite(grace)
        ):
            raise InvalidInput("grace", f"must be a finite number of seconds, got {grace!r}")
        if grace < 0:
            raise InvalidInput("grace", f"must not be negative, got {grace!r}")
        cap = self.max_backfill
        if isinstance(cap, bool) or not isinstance(cap, int) or cap < 1:
            raise InvalidInput("max_backfill", f"must be a whole number >= 1, got {cap!r}")


@dataclass(frozen=True)
class CatchUpPlan:
    """Skip ``skipped`` (the newest ones; ``skipped_more`` older ones are only counted), then
    run ``next_slot``. Every listed slot is earlier than ``next_slot``."""

    skipped: tuple[datetime, ...]
    next_slot: datetime
    skipped_more: int = 0

    @property
    def skipped_total(self) -> int:
        return len(self.skipped) + self.skipped_more


def plan_catchup(
    schedule: Schedule,
    first_due: datetime,
    now: datetime,
    catch_up: CatchUp,
    record_limit: int = DEFAULT_RECORD_LIMIT,
) -> CatchUpPlan:
    """Plan the slots from ``first_due`` (the earliest slot not yet run) given DB time ``now``.

    Due slots are the slots ``s`` with ``first_due <= s <= now``. If ``first_due`` is not a slot
    it is a lower bound: the first slot at or after it counts. ``next_slot`` is always a slot.
    """
    for name, moment in (("first_due", first_due), ("now", now)):
        if moment.tzinfo is None or moment.utcoffset() is None:
            raise InvalidInput(name, f"must be a timezone-aware datetime, got {moment!r}")
    if isinstance(record_limit, bool) or not isinstance(record_limit, int) or record_limit < 0:
        raise InvalidInput("record_limit", f"must be a whole number >= 0, got {record_limit!r}")
    interval = schedule.interval
    if interval is not None:
        return _plan_every(interval // US, first_due, now, catch_up, record_limit)
    if catch_up.policy == "skip":
        return _plan_cron_skip(schedule, first_due, now - _grace(catch_up), record_limit)
    keep = 1 if catch_up.policy == "once" else catch_up.max_backfill
    return _plan_cron_keep(schedule, first_due, now, keep, record_limit)


def _grace(catch_up: CatchUp) -> timedelta:
    return timedelta(seconds=catch_up.grace_s)


def _plan_every(
    every_us: int, first_due: datetime, now: datetime, catch_up: CatchUp, record_limit: int
) -> CatchUpPlan:
    """Slot ``i`` is ``epoch + i * every``: index arithmetic, whatever the outage length."""

    def index_at_or_after(moment: datetime) -> int:
        return -(-micros(moment) // every_us)

    def slot(index: int) -> datetime:
        return from_micros(index * every_us)

    first = index_at_or_after(first_due)
    newest_due = micros(now) // every_us
    if catch_up.policy == "skip":
        cut = max(first, index_at_or_after(now - _grace(catch_up)))
    elif newest_due < first:
        cut = first
    elif catch_up.policy == "once":
        cut = newest_due
    else:
        cut = max(first, newest_due - catch_up.max_backfill + 1)
    listed_from = max(first, cut - record_limit)
    return CatchUpPlan(
        skipped=tuple(slot(index) for index in range(listed_from, cut)),
        next_slot=slot(cut),
        skipped_more=listed_from - first,
    )


def _plan_cron_skip(
    schedule: Schedule, first_due: datetime, cut: datetime, record_limit: int
) -> CatchUpPlan:
    """Skip the slots before ``cut`` (= now - grace); the first slot at or after it is next."""
    recent: deque[datetime] = deque(maxlen=record_limit)
    for count, slot in enumerate(schedule.iter_after(first_due - US)):
        if slot >= cut:
            return CatchUpPlan(tuple(recent), slot, count - len(recent))
        recent.append(slot)
    raise InvalidInput("schedule", f"{schedule.expr!r} has no slot after {cut.isoformat()}")


def _plan_cron_keep(
    schedule: Schedule, first_due: datetime, now: datetime, keep: int, record_limit: int
) -> CatchUpPlan:
    """Run the newest ``keep`` due slots; skip the older ones."""
    window: deque[datetime] = deque(maxlen=record_limit + keep)  # the newest due slots
    due = 0
    slots = schedule.iter_after(first_due - US)
    for slot in slots:
        if slot > now:
            future = slot
            break
        window.append(slot)
        due += 1
    else:
        raise InvalidInput("schedule", f"{schedule.expr!r} has no slot after {now.isoformat()}")
    if due == 0:
        return CatchUpPlan((), future, 0)
    cut = max(0, due - keep)  # index among due slots of the first one to run
    newest = list(window)  # due slots [due - len(window), due)
    offset = due - len(newest)
    listed = newest[max(cut - record_limit, offset) - offset : cut - offset]
    return CatchUpPlan(tuple(listed), newest[cut - offset], cut - len(listed))
