"""What crosses the lock session per run: claimed jobs, completions and catch-up skips,
and the statement parameters they travel as.

Kept apart from the session itself because the executor, the completion writer and the
outcome policy use these records without touching a connection, and because their
encoding is the node's hot path: one record per run, a claim or completion of a hundred
at a time.
"""

from __future__ import annotations

import json
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, NamedTuple
from uuid import UUID

__all__ = [
    "NEVER",
    "ClaimResult",
    "ClaimedJob",
    "Completion",
    "Skip",
    "claimed_jobs",
    "claimed_of",
    "complete_params",
    "finished_one_offs",
    "int_array",
]


_ARRAYS_MAX = 64
_arrays: dict[frozenset[int], str] = {}


def int_array(values: Collection[int]) -> str:
    """A sorted ``int[]`` literal for a set of shards: psycopg dumps a Python list element by
    element, a string in one go. Remembered per shard set: the held set changes only when
    the ring moves, while claims and recovery passes send it every second
    (tests/unit/test_shard_arrays.py)."""
    key = values if isinstance(values, frozenset) else frozenset(values)
    found = _arrays.get(key)
    if found is None:
        if len(_arrays) >= _ARRAYS_MAX:
            _arrays.clear()
        found = _arrays[key] = "{" + ",".join(map(str, sorted(key))) + "}"
    return found


# The next_run_at of a job that is never due: paused (the SQL's '9999-01-01Z'), or done (a
# one-off job whose slot has run: a completion with this next_run_at marks the job `done`).
NEVER = datetime(9999, 1, 1, tzinfo=UTC)


class ClaimedJob(NamedTuple):
    """A claimed job as the claim statements return it (in this field order): the slot and
    its lease, then the job's options that a claim returns, in the order the options
    declare them (``claimed`` in cluster/jobs/spec.py, written out by ``{fields:claimed:..}``
    in the statements; tests/unit/test_job_options.py), then what the slot brings along.

    A named tuple, not a frozen dataclass: a claim builds a hundred at a time, and a
    frozen dataclass's ``__init__`` sets each field through ``object.__setattr__``."""

    id: UUID
    tenant: str
    name: str
    payload: dict[str, Any] | None  # None when empty: the claim parses no '{}' per run
    shard: int
    slot: datetime
    attempt: int
    lease_token: int
    # When the attempt is due: the slot, or the end of a retry's backoff. A claim that
    # looks ahead returns jobs due a moment later; they start then.
    due: datetime
    # The options a claim returns.
    schedule: str
    handler: str
    tz: str
    catch_up: str
    grace_s: float
    max_backfill: int
    timeout_s: float
    retries: int
    retry_backoff_s: float
    dst_repeated: str
    dst_skipped: str
    output_limit: int  # bytes kept per part of the run's output
    overlap: str  # forbid | allow | replace
    cancel_grace_s: float
    jitter_s: float  # the slot starts at slot + its offset (cluster.timing.jitter)
    asserts: str | None  # checks of the run's metrics (cluster.jobs.assertions)
    assert_fails: bool  # a failed check fails the run rather than raising an alert
    each_node: bool  # the slot is fanned out to every live member (docs/design/each-node.md)
    # What the slot brings along.
    cancel_by: str | None = None  # who asked to cancel the slot before this claim
    # A slot of an overlap `allow` job running as a flight, under a lease of its own
    # (migration 009): its writes go to the flights statements, keyed by (id, slot).
    flight: bool = False
    # The job's calendar with its on_excluded and business_day, as JSON text (None: no
    # calendar); node.pipeline.outcomes plans its slots against it.
    calendar_rule: str | None = None
    gated: bool = False  # the job has upstreams: its first attempt asks its gate (migration 021)
    previous_slot: datetime | None = None  # the slot handled before this one
    last_success: datetime | None = None  # the newest slot that succeeded
    state: dict[str, Any] | None = None  # what the last successful run left (ctx.state)
    origin: str | None = None  # why the slot runs (NULL: its schedule), for its trace span
    # The slot waited for a named limit and its key let it in: it runs, however late
    # (docs/design/limits.md, "Letting in").
    waited: bool = False
    # When the job's timing was written (None: at its creation): the walk on from a slot
    # before it goes to the timing's first slot after it (migration
    # 0.3.0_pre_zzzzz_timing_from).
    timing_from: datetime | None = None


_FIELDS = len(ClaimedJob._fields)


def claimed_jobs(rows: Sequence[tuple[Any, ...]], skip: int) -> list[ClaimedJob]:
    """The claimed jobs of a claim's rows, whose fields follow ``skip`` leading columns; a
    row with a null id is the claim's report alone (nothing was claimed).

    Built by position with ``tuple.__new__``, cheaper than passing a named tuple's 25
    fields one by one; the width is checked once per claim instead
    (tests/unit/test_claim_rows.py)."""
    if rows and len(rows[0]) != skip + _FIELDS:
        raise ValueError(f"a claim row has {len(rows[0]) - skip} job fields, not {_FIELDS}")
    make = tuple.__new__
    return [make(ClaimedJob, row[skip:]) for row in rows if row[skip] is not None]


def claimed_of(row: Sequence[Any]) -> ClaimedJob:
    """The claimed job of a row that starts as a claim's does (``recover``'s, whose report
    follows)."""
    return ClaimedJob._make(row[:_FIELDS])


@dataclass(frozen=True)
class ClaimResult:
    db_now: datetime
    next_due: datetime | None
    jobs: list[ClaimedJob]
    held: bool = False


class Completion(NamedTuple):
    """The outcome of one claimed slot and where the job goes next (one per run, so a
    named tuple too)."""

    id: UUID
    token: int
    slot: datetime
    outcome: str  # succeeded | failed | timed_out | cancelled | skipped
    error: str | None
    duration_s: float | None
    next_run_at: datetime
    next_slot: datetime
    next_attempt: int
    output: str | None = None  # the run's output object as JSON text (node.handlers.output)
    origin: str | None = None  # why the next slot runs: 'calendar' when the calendar moved it
    state: str | None = None  # ctx.state as JSON text when a successful run changed it
    # Why the run's metrics failed its job's --assert: raises `assertion_failed` with it.
    assertion: str | None = None


@dataclass(frozen=True)
class Skip:
    """A slot recorded as skipped by the catch-up policy; ``since``: the record also stands
    for the ``more`` unlisted slots from then up to its own (``runs.skipped_from``).
    ``if_paused``: written only if the completion pauses the job (after failed slots in a
    row), for a slot due by then that the paused job will not run."""

    job_id: UUID
    slot: datetime
    reason: str
    since: datetime | None = None
    more: int = 0
    if_paused: bool = False


def finished_one_offs(done: Sequence[Completion], applied: Collection[UUID]) -> list[UUID]:
    """The jobs of ``done`` whose completion, applied, made them ``done`` (one-off jobs)."""
    return [d.id for d in done if d.next_run_at >= NEVER and d.id in applied]


def _skip_row(skip: Skip) -> tuple[str | int | bool | None, ...]:
    """A skip as ``complete`` and ``spawn`` read it: [job id, slot, reason], and the time it
    stands for slots from and how many, if it does, and whether it waits for a pause."""
    row = (skip.job_id.hex, skip.slot.isoformat(), skip.reason)
    since = None if skip.since is None else skip.since.isoformat()
    if skip.if_paused:
        return (*row, since, skip.more, True)
    return row if since is None else (*row, since, skip.more)


def complete_params(
    done: Sequence[Completion],
    skips: Sequence[Skip],
    node_id: str,
    zone: str,
    now: datetime | None,
) -> dict[str, Any]:
    """Parameters of the batched ``complete`` statement.

    The batch goes as two JSON texts, a row of plain values per completion and per skip,
    cheaper to encode than a dozen typed arrays adapted element by element. Ids are hex,
    times ISO 8601 (``next_slot`` null when it equals ``next_run_at``), durations whole
    microseconds, output its JSON text or null (tests/integration/test_history.py).
    """
    texts: dict[datetime, str] = {}

    def iso(t: datetime) -> str:
        # A batch holds few distinct times (a fan-out's jobs share their slot and the
        # next one): each is formatted once.
        found = texts.get(t)
        if found is None:
            found = texts[t] = t.isoformat()
        return found

    rows = [
        (
            c.id.hex,
            c.token,
            iso(c.slot),
            c.outcome,
            c.error,
            None if c.duration_s is None else round(c.duration_s * 1e6),
            iso(c.next_run_at),
            None if c.next_slot == c.next_run_at else iso(c.next_slot),
            c.next_attempt,
            c.output,
            c.origin,
            c.state,
            c.assertion,
        )
        for c in done
    ]
    skipped = [_skip_row(s) for s in skips]
    return {
        "done": json.dumps(rows, ensure_ascii=False),
        "skips": json.dumps(skipped, ensure_ascii=False),
        "node_id": node_id,
        "zone": zone,
        "now": now,
    }


def flight_params(
    done: Sequence[Completion], node_id: str, zone: str, now: datetime | None
) -> dict[str, Any]:
    """Parameters of ``complete_flights``: per attempt [job id, slot, token, outcome,
    error, duration_us, retry_at (the next attempt's time, null for a slot's last
    attempt), output, assertion]."""
    rows = [
        (
            c.id.hex,
            c.slot.isoformat(),
            c.token,
            c.outcome,
            c.error,
            None if c.duration_s is None else round(c.duration_s * 1e6),
            c.next_run_at.isoformat() if c.next_attempt > 1 else None,
            c.output,
            c.assertion,
        )
        for c in done
    ]
    return {
        "done": json.dumps(rows, ensure_ascii=False),
        "node_id": node_id,
        "zone": zone,
        "now": now,
    }


def spawn_params(
    spawns: Sequence[Completion],
    skips: Sequence[Skip],
    node_id: str,
    zone: str,
    lease_s: float,
    now: datetime | None,
    members: Sequence[tuple[str, str | None]] = (),
) -> dict[str, Any]:
    """Parameters of ``spawn``: per claimed slot [id, token, slot, next_run_at, next_slot];
    ``members``: the live members and their zones, for each-node slots."""
    rows = [
        (c.id.hex, c.token, c.slot.isoformat(), c.next_run_at.isoformat(), c.next_slot.isoformat())
        for c in spawns
    ]
    skipped = [_skip_row(s) for s in skips]
    return {
        "spawns": json.dumps(rows),
        "skips": json.dumps(skipped, ensure_ascii=False),
        "members": json.dumps(list(members), ensure_ascii=False),
        "node_id": node_id,
        "zone": zone,
        "lease_s": lease_s,
        "now": now,
    }
