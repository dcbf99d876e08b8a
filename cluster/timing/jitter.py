"""Start jitter: where in ``[slot, slot + jitter)`` a slot of a job starts (pure, no I/O).

A slot keeps its nominal time as its identity (the run row's ``scheduled_for``, the
idempotency key, ``jobs.slot_at``); only its start (``jobs.next_run_at``) moves. The offset
is a hash of the job's tenant, name and slot, so every node computes the same start and a
slot's start never moves between runs of the cluster. The tenant and name, not the job's
uuid, key the hash: they are the job's identity in every API and are known before the
row is written (an upsert of an existing job keeps its uuid, which the writer does not
know yet). A jitter must stay below the schedule's smallest interval, so jittered starts
keep the slots' order: ``start(s1) < s2 <= start(s2)``.
"""

from __future__ import annotations

import hashlib
import itertools
import math
from datetime import UTC, datetime, timedelta

from cluster.errors import InvalidInput
from cluster.timing.durations import format_duration
from cluster.timing.instants import US, US_PER_S
from cluster.timing.schedule import Schedule

__all__ = ["check_jitter", "jitter_offset", "jittered", "smallest_interval"]

# The smallest interval of a cron schedule is measured over its first slots after each of
# these instants: a winter and a summer day, so a DST change that shortens a gap is seen.
_PROBES = (datetime(2001, 1, 1, tzinfo=UTC), datetime(2001, 3, 20, tzinfo=UTC),
           datetime(2001, 9, 20, tzinfo=UTC))  # fmt: skip
_PROBE_SLOTS = 400


def jitter_offset(tenant: str, name: str, slot: datetime, jitter_s: float) -> timedelta:
    """The offset in ``[0, jitter_s)`` of the job's ``slot``, whole microseconds."""
    span_us = int(jitter_s * US_PER_S)
    if span_us <= 0:
        return timedelta(0)
    key = f"{tenant}/{name}:{slot.astimezone(UTC).isoformat()}".encode()
    digest = int.from_bytes(hashlib.blake2b(key, digest_size=8).digest(), "big")
    return (digest * span_us >> 64) * US


def jittered(tenant: str, name: str, slot: datetime, jitter_s: float) -> datetime:
    """When the job's ``slot`` starts: the slot plus its offset."""
    if jitter_s <= 0:
        return slot
    return slot + jitter_offset(tenant, name, slot, jitter_s)


def smallest_interval(schedule: Schedule) -> float:
    """The smallest gap between two consecutive slots, in seconds (inf for a single slot)."""
    interval = schedule.interval
    if interval is not None:
        return interval.total_seconds()
    smallest = math.inf
    for probe in _PROBES:
        slots = list(itertools.islice(schedule.iter_after(probe), _PROBE_SLOTS))
        for earlier, later in itertools.pairwise(slots):
            smallest = min(smallest, (later - earlier).total_seconds())
    return smallest


def check_jitter(schedule: Schedule, jitter_s: float) -> float:
    """``jitter_s`` if it is valid for ``schedule``, else ``InvalidInput``."""
    if not math.isfinite(jitter_s) or jitter_s < 0:
        raise InvalidInput("jitter", f"must not be negative, got {jitter_s!r}")
    if jitter_s == 0:
        return 0.0
    if schedule.at is not None:
        raise InvalidInput("jitter", "a one-off (@at) job has one slot: there is nothing to spread")
    smallest = smallest_interval(schedule)
    if jitter_s >= smallest:
        raise InvalidInput(
            "jitter",
            f"{format_duration(jitter_s)} is not below the schedule's smallest interval "
            f"({format_duration(smallest)})",
        )
    return float(jitter_s)
