"""Read models for jobs and runs, and their stable JSON shape (documented in docs/json.md)."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import Any
from uuid import UUID

from cluster.jobs.handlerrefs import redacted
from cluster.timing.calendared import CalendarRule
from cluster.timing.schedule import Schedule, parse_schedule


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


_EXPECT_KEYS = ("expect_max_s", "expect_min_s", "deadline", "expect_baseline", "asserts")
_NO_EXPECTATIONS: dict[str, Any] = {
    **{"assert" if k == "asserts" else k: None for k in _EXPECT_KEYS},
    "assert_fails": False,
}


def expectations_of(row: dict[str, Any]) -> dict[str, Any] | None:
    """A job row's expectations under their JSON keys (``assert`` for ``asserts``), or
    None when it has none."""
    if all(row.get(k) is None for k in _EXPECT_KEYS):
        return None
    found = {"assert" if k == "asserts" else k: row.get(k) for k in _EXPECT_KEYS}
    return {**found, "assert_fails": bool(row.get("assert_fails"))}


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
    expect: dict[str, Any] | None = None  # its expectations (to_json's keys), None: none
    last_success_at: datetime | None = None  # the newest slot that succeeded
    # Health (docs/jobs.md): ok, slow, overdue, too_fast or assertion_failed, and since when.
    expect_state: str | None = None
    expect_state_at: datetime | None = None

    def health(self) -> dict[str, Any]:
        """What the console's jobs list shows: the last success, the next slot, and the
        expectation state (None until a run of a job with expectations was judged)."""
        return {
            "last_success": iso(self.last_success_at),
            "next_slot": iso(self.next_run_at),
            "state": self.expect_state,
            "state_at": iso(self.expect_state_at),
        }

    watch: bool = False  # runs come from pings, never from a node (docs/jobs.md)
    adopt_at: datetime | None = None  # `jobs adopt`: the first slot Pulse runs itself

    def rule(self) -> CalendarRule | None:
        """The calendar the job plans with (its copy), or None."""
        return None if self.calendar_rule is None else CalendarRule.from_json(self.calendar_rule)

    def parsed_schedule(self) -> Schedule:
        return parse_schedule(self.schedule, self.tz, self.dst_repeated, self.dst_skipped)  # type: ignore[arg-type]

    @classmethod
    def from_row(cls, row: dict[str, Any]) -> Job:
        return cls(
            id=row["id"],
            tenant=row["tenant_id"],
            name=row["name"],
            schedule=row["schedule"],
            tz=row["tz"],
            handler=row["handler"],
            payload=row["payload"],
            status=row["status"],
            paused=row["paused"],
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
            catch_up=row["catch_up"],
            grace_s=row["grace_s"],
            max_backfill=row["max_backfill"],
            timeout_s=row["timeout_s"],
            retries=row["max_retries"],
            retry_backoff_s=row["retry_backoff_s"],
            dst_repeated=row["dst_repeated"],
            dst_skipped=row["dst_skipped"],
            created_at=row["created_at"],
            updated_at=row["updated_at"],
            keep_for_s=row["keep_for_s"],
            keep_runs=row["keep_runs"],
            output_limit=row["output_limit"],
            late_after_s=row["late_after_s"],
            pause_after_failures=row["pause_after_failures"],
            failed_slots=row["failed_slots"],
            pause_note=row["pause_note"],
            overlap=row["overlap"],
            max_concurrent=row["max_concurrent"],
            cancel_grace_s=row["cancel_grace_s"],
            cancel_by=row["cancel_by"],
            zones=tuple(row.get("zones") or ()),
            each_zone=bool(row.get("each_zone")),
            jitter_s=row.get("jitter_s", 0.0),
            remove_when_done=row.get("remove_when_done", False),
            calendar=row.get("calendar"),
            on_excluded=row.get("on_excluded"),
            business_day=row.get("business_day"),
            calendar_rule=row.get("calendar_rule"),
            paused_until=row.get("paused_until"),
            revision=row.get("revision", 1),
            payload_schema=row.get("payload_schema"),
            max_runs=row.get("max_runs"),
            runs_done=row.get("runs_done", 0),
            labels=row.get("labels") or {},
            expect=expectations_of(row),
            last_success_at=row.get("last_success_at"),
            expect_state=row.get("expect_state"),
            expect_state_at=row.get("expect_state_at"),
            watch=bool(row.get("watch")),
            adopt_at=row.get("adopt_at"),
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "id": str(self.id),
            "tenant": self.tenant,
            "name": self.name,
            "schedule": self.schedule,
            "tz": self.tz,
            "handler": redacted(self.handler),  # a broker URL's password masked
            "payload": self.payload,
            "status": self.status,
            "paused": self.paused,
            "shard": self.shard,
            "next_run_at": iso(self.next_run_at),
            "attempt": self.attempt,
            "last_run_at": iso(self.last_run_at),
            "locked_by": self.locked_by,
            "lease_expires_at": iso(self.lease_expires_at),
            "catch_up": self.catch_up,
            "grace_s": self.grace_s,
            "max_backfill": self.max_backfill,
            "timeout_s": self.timeout_s,
            "retries": self.retries,
            "retry_backoff_s": self.retry_backoff_s,
            "dst_repeated": self.dst_repeated,
            "dst_skipped": self.dst_skipped,
            "keep_for_s": self.keep_for_s,
            "keep_runs": self.keep_runs,
            "output_limit": self.output_limit,
            "late_after_s": self.late_after_s,
            "pause_after_failures": self.pause_after_failures,
            "failed_slots": self.failed_slots,
            "pause_note": self.pause_note,
            "overlap": self.overlap,
            "max_concurrent": self.max_concurrent,
            "cancel_grace_s": self.cancel_grace_s,
            "cancel_by": self.cancel_by,
            "zones": list(self.zones) or None,
            "each_zone": self.each_zone,
            "jitter_s": self.jitter_s,
            "slot_at": iso(self.slot_at),
            "remove_when_done": self.remove_when_done,
            "calendar": self.calendar,
            "on_excluded": self.on_excluded,
            "business_day": self.business_day,
            "paused_until": iso(self.paused_until),
            "revision": self.revision,
            "payload_schema": self.payload_schema,
            "schedules": [e.to_json() for e in self.parsed_schedule().entries] or None,
            "max_runs": self.max_runs,
            "runs_done": self.runs_done,
            "labels": self.labels,
            **(self.expect or _NO_EXPECTATIONS),
            "health": self.health(),
            "watch": self.watch,
            "adopt_at": iso(self.adopt_at),
            "created_at": iso(self.created_at),
            "updated_at": iso(self.updated_at),
        }


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
    def metrics(self) -> dict[str, float]:
        """The figures the run reported (``ctx.metric``, a shell's metrics file)."""
        return dict((self.output or {}).get("metrics") or {})
