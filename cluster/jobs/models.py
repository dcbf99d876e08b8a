"""Read models for jobs and runs, and their stable JSON shape (documented in docs/json.md)."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import Any
from uuid import UUID

from cluster.jobs import masking
from cluster.jobs.fields import MAX_JSON_DEPTH, too_deep
from cluster.jobs.spec import OPTIONS
from cluster.timing.calendared import CalendarRule
from cluster.timing.schedule import CHAINED_NEXT, Schedule, parse_schedule


class RunStatus(StrEnum):
    """What became of a slot's attempt (the ``runs.status`` check of the schema), in the
    order Pulse lists them: in flight, what a handler's attempt ends as, then the slots
    that ended without one (skipped at claim, lost with their node)."""

    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    TIMED_OUT = "timed_out"
    CANCELLED = "cancelled"
    SKIPPED = "skipped"
    LOST = "lost"


RUN_STATUSES: tuple[str, ...] = tuple(s.value for s in RunStatus)  # all, in that order


class JobStatus(StrEnum):
    """Where a job stands (the ``jobs.status`` check of the schema): waiting for its slot,
    running it, paused, or done (a one-off that ran, ``max_runs`` reached). The API and the
    console take the same list (``/console/statuses.js``)."""

    IDLE = "idle"
    RUNNING = "running"
    PAUSED = "paused"
    DONE = "done"


JOB_STATUSES: tuple[str, ...] = tuple(s.value for s in JobStatus)  # all, in that order
# Never claimed, whatever their next_run_at says.
NEVER_DUE = frozenset({JobStatus.PAUSED, JobStatus.DONE})
# How an attempt a node ran ends (a metric counts each, even at zero).
ATTEMPT_OUTCOMES = (RunStatus.SUCCEEDED, RunStatus.FAILED, RunStatus.TIMED_OUT, RunStatus.CANCELLED)
# The handler ran to its end, whatever it said.
FINISHED = frozenset({RunStatus.SUCCEEDED, RunStatus.FAILED, RunStatus.TIMED_OUT})
# Kept for keep_failed_for rather than keep_for (docs/retention.md).
FAILURES = frozenset({RunStatus.FAILED, RunStatus.TIMED_OUT, RunStatus.LOST})


def iso(value: datetime | None) -> str | None:
    return value.isoformat() if value is not None else None


def shown(when: datetime | None) -> datetime | None:
    """A job's next time as read models show it: None for the far-future markers that keep
    a job out of the claim (9999-01-01 paused, done or held by a gate; 9998-01-01 a chained
    job awaiting its upstream's next slot), which docs/json.md calls null."""
    return None if when is None or when >= CHAINED_NEXT else when


@dataclass(frozen=True)
class Job:
    id: UUID
    tenant: str
    name: str
    schedule: str
    tz: str
    handler: str
    payload: dict[str, Any]
    status: str
    paused: bool
    shard: int
    next_run_at: datetime | None  # None while paused or done: such a job is never due
    slot_at: datetime
    attempt: int
    last_run_at: datetime | None
    locked_by: str | None
    lease_expires_at: datetime | None
    lease_token: int
    catch_up: str
    grace_s: float
    max_backfill: int
    timeout_s: float
    retries: int
    retry_backoff_s: float
    dst_repeated: str
    dst_skipped: str
    created_at: datetime
    updated_at: datetime
    keep_for_s: float | None
    keep_runs: int | None
    output_limit: int
    late_after_s: float
    pause_after_failures: int | None
    failed_slots: int
    pause_note: str | None
    overlap: str
    max_concurrent: int
    cancel_grace_s: float
    cancel_by: str | None  # who asked to cancel the running slot, until it ends
    zones: tuple[str, ...] = ()  # pinned to these zones; empty: any zone
    each_zone: bool = False  # runs through one child per live zone (docs/zones.md)
    jitter_s: float = 0.0  # a slot starts within [slot, slot + jitter_s) (cluster.timing.jitter)
    remove_when_done: bool = False  # a one-off job is deleted once its slot has run
    calendar: str | None = None  # a business calendar (docs/time.md)
    on_excluded: str | None = None
    business_day: int | None = None
    calendar_rule: str | None = None  # the calendar as the job plans with it (JSON text)
    paused_until: datetime | None = None  # `pause --until`: idle, its next slot at or after
    revision: int = 1  # of its definition (job_revisions, docs/jobs.md)
    payload_schema: dict[str, Any] | None = None  # every payload matches it (cluster.jobs.payloads)
    max_runs: int | None = None  # done after this many runs (docs/jobs.md)
    runs_done: int = 0
    labels: dict[str, str] = field(default_factory=dict)  # key=value (docs/jobs.md#labels)
    # Its expectations of each run (docs/jobs.md#expectations); None and false: none.
    expect_max_s: float | None = None
    expect_min_s: float | None = None
    deadline: str | None = None
    expect_baseline: float | None = None
    asserts: str | None = None
    assert_fails: bool = False
    last_success_at: datetime | None = None  # the newest slot that succeeded
    # Health (docs/jobs.md): ok, slow, overdue, too_fast or assertion_failed, and since when.
    expect_state: str | None = None
    expect_state_at: datetime | None = None

    def health(self) -> dict[str, Any]:
        """What the console's jobs list shows: the last success, the next slot, and the
        expectation state (None until a run of a job with expectations was judged)."""
        return {
            "last_success": iso(self.last_success_at),
            "next_slot": iso(shown(self.next_run_at)),
            "state": self.expect_state,
            "state_at": iso(self.expect_state_at),
        }

    watch: bool = False  # runs come from pings, never from a node (docs/jobs.md)
    adopt_at: datetime | None = None  # `jobs adopt`: the first slot Pulse runs itself
    description: str | None = None  # what the job is for, in the user's words
    api_run: bool = False  # API tokens may run it (docs/security.md)
    priority: int = 0  # among its tenant's due slots, higher first (docs/jobs.md#priorities)
    each_node: bool = False  # each slot runs on every live member (docs/design/each-node.md)
    uses: tuple[str, ...] = ()  # named limits each run takes (docs/limits.md)
    # When its current timing was written (None: the one it was created with): a walk on
    # from a slot before it goes to the timing's first slot after it.
    timing_from: datetime | None = None

    def rule(self) -> CalendarRule | None:
        """The calendar the job plans with (its copy), or None."""
        return None if self.calendar_rule is None else CalendarRule.from_json(self.calendar_rule)

    def parsed_schedule(self) -> Schedule:
        return parse_schedule(self.schedule, self.tz, self.dst_repeated, self.dst_skipped)  # type: ignore[arg-type]

    def walked_schedule(self) -> Schedule:
        """The schedule the job walks on by from its slot: no slot at or before
        ``timing_from``."""
        return self.parsed_schedule().starting(self.timing_from)

    @classmethod
    def from_row(cls, row: dict[str, Any]) -> Job:
        """A job row (``SELECT *``): its options as declared (``OPTIONS.read``), its state."""
        return cls(
            **{d.name: _read(d.default, row[str(d.column)]) for d in OPTIONS.read},
            id=row["id"],
            status=row["status"],
            shard=row["shard_id"],
            # The stored next_run_at of a paused job is a far-future marker (9999-01-01)
            # that keeps it out of the claim's index range.
            next_run_at=row["next_run_at"] if row["status"] not in NEVER_DUE else None,
            slot_at=row["slot_at"],
            attempt=row["attempt"],
            last_run_at=row["last_run_at"],
            locked_by=row["locked_by"],
            lease_expires_at=row["lease_expires_at"],
            lease_token=row["lease_token"],
            created_at=row["created_at"],
            updated_at=row["updated_at"],
            failed_slots=row["failed_slots"],
            pause_note=row["pause_note"],
            cancel_by=row["cancel_by"],
            calendar_rule=row["calendar_rule"],
            paused_until=row["paused_until"],
            revision=row["revision"],
            runs_done=row["runs_done"],
            last_success_at=row["last_success_at"],
            expect_state=row["expect_state"],
            expect_state_at=row["expect_state_at"],
            adopt_at=row["adopt_at"],
            timing_from=row.get("timing_from"),
        )

    def to_json(self) -> dict[str, Any]:
        """The stable JSON of a job (docs/json.md): its options under their names, then its
        state."""
        options = {d.name: getattr(self, d.name) for d in OPTIONS.read}
        for d in OPTIONS.read:
            if d.option.jsonb and too_deep(options[d.name]):  # written before 0.3.0 capped it
                options[d.name] = {"not_shown": f"nested deeper than {MAX_JSON_DEPTH} levels"}
        options["handler"] = masking.shown(self.handler)  # literal credentials masked
        options["zones"] = list(self.zones) or None
        options["uses"] = list(self.uses)
        return {
            "id": str(self.id),
            **options,
            "status": self.status,
            "shard": self.shard,
            "next_run_at": iso(shown(self.next_run_at)),
            "slot_at": iso(shown(self.slot_at)),
            "attempt": self.attempt,
            "last_run_at": iso(self.last_run_at),
            "locked_by": self.locked_by,
            "lease_expires_at": iso(self.lease_expires_at),
            "failed_slots": self.failed_slots,
            "pause_note": self.pause_note,
            "cancel_by": self.cancel_by,
            "paused_until": iso(self.paused_until),
            "revision": self.revision,
            "schedules": [e.to_json() for e in self.parsed_schedule().entries] or None,
            "runs_done": self.runs_done,
            "health": self.health(),
            "adopt_at": iso(self.adopt_at),
            "created_at": iso(self.created_at),
            "updated_at": iso(self.updated_at),
        }


def _read(default: Any, stored: Any) -> Any:
    """An option's column as the read model holds it: a list as a tuple, and no zones or
    labels (NULL) as none."""
    if isinstance(default, tuple):
        return tuple(stored or ())
    if stored is None and isinstance(default, dict):
        return {}
    return stored


@dataclass(frozen=True)
class Run:
    """One slot's run: its row in the run history, or the attempt in flight.

    The run row is written when an attempt ends; an attempt in flight (status ``running``)
    is read from its job row, and has no ``id`` unless an earlier attempt of the slot left
    a row (the one this attempt will update).
    """

    id: int | None
    job_id: UUID
    tenant: str
    job_name: str
    scheduled_for: datetime
    attempt: int
    node_id: str | None
    zone: str | None
    status: str  # a RunStatus
    started_at: datetime | None
    finished_at: datetime | None
    duration_s: float | None
    last_error: str | None
    # What the attempt produced (``runs.output``); read by ``JobStore.run``, not by listings.
    output: dict[str, Any] | None = None
    # Who asked for the slot: schedule, or backfill (migration 011; docs/time.md).
    origin: str = "schedule"
    # The job's revision the slot was claimed under (None: claimed before migration 029).
    revision: int | None = None

    @classmethod
    def from_row(cls, row: dict[str, Any]) -> Run:
        return cls(
            id=row["id"],
            job_id=row["job_id"],
            tenant=row["tenant_id"],
            job_name=row["job_name"],
            scheduled_for=row["scheduled_for"],
            attempt=row["attempt"],
            node_id=row["node_id"],
            zone=row["zone"],
            status=row["status"],
            started_at=row["started_at"],
            finished_at=row["finished_at"],
            duration_s=row["duration_s"],
            last_error=row["last_error"],
            output=row.get("output"),
            origin=row.get("origin") or "schedule",
            revision=row.get("revision"),
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "job_id": str(self.job_id),
            "tenant": self.tenant,
            "job": self.job_name,
            "scheduled_for": iso(self.scheduled_for),
            "attempt": self.attempt,
            "node_id": self.node_id,
            "zone": self.zone,
            "status": self.status,
            "started_at": iso(self.started_at),
            "finished_at": iso(self.finished_at),
            "duration_s": self.duration_s,
            "error": self.last_error,
            "origin": self.origin,
            "revision": self.revision,
        }

    def output_json(self) -> dict[str, Any]:
        """The output object of ``pulse runs show --json``: every part, null if absent."""
        found = self.output or {}
        parts: dict[str, Any] = {k: found.get(k) for k in ("stdout", "stderr", "result", "log")}
        return {**parts, "truncated": list(found.get("truncated") or [])}

    @property
    def coverage(self) -> dict[str, Any] | None:
        """An every-node slot's coverage, ``{summary, members, ended}`` (each member's end:
        ``{status, at, why}``); None for any other run (docs/jobs.md)."""
        found = (self.output or {}).get("coverage")
        return dict(found) if isinstance(found, dict) else None

    @property
    def metrics(self) -> dict[str, float]:
        """The figures the run reported (``ctx.metric``, a shell's metrics file)."""
        return dict((self.output or {}).get("metrics") or {})
