"""``pulse audit``'s reading of the store: the jobs of a scope, their revisions and their
run rows over a range, in one snapshot, the runs streamed through a server-side cursor into
the pure merge of ``cluster.jobs.ledger`` job by job. Nothing here decides a verdict;
nothing holds more than a batch of rows (docs/design/audit.md).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import defaultdict
from collections.abc import AsyncGenerator, Mapping, Sequence
from contextlib import aclosing
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any
from uuid import UUID

import psycopg
from psycopg.rows import tuple_row

from cluster.config.retention import Retention
from cluster.errors import InvalidInput
from cluster.jobs.ledger import Coalesced, Job, JobAudit, Line, Prior, Record
from cluster.jobs.models import JobStatus
from cluster.jobs.spans import Span, spans_of
from cluster.store.config import read_config
from cluster.store.connect import Conn, Row
from cluster.store.queries import fetch_all, fetch_one, query, store_error
from cluster.timing.durations import format_duration

__all__ = ["BATCH", "JOBS_PAGE", "MAX_RANGE", "Kept", "Scope", "audit_lines"]

BATCH = 20_000  # run rows per fetch of the cursor
JOBS_PAGE = 1000  # jobs read, and merged, at a time
MAX_RANGE = timedelta(days=92)


@dataclass(frozen=True)
class Scope:
    """What to audit: ``[start, end)``, one tenant or job (None: all the caller may see),
    and the caller's tenant scope (None: every tenant), enforced in every statement."""

    start: datetime
    end: datetime
    tenant: str | None = None
    job: str | None = None
    scope: str | None = None
    grace_s: float = 60.0
    now: datetime | None = None

    def checked(self) -> Scope:
        if self.start.tzinfo is None or self.end.tzinfo is None:
            raise InvalidInput("from", "needs a UTC offset, e.g. 2026-01-01T00:00:00+00:00")
        if self.end <= self.start:
            raise InvalidInput("to", f"{self.end.isoformat()} is not after from")
        if self.end - self.start > MAX_RANGE:
            raise InvalidInput("to", f"at most {MAX_RANGE.days} days after from")
        if self.grace_s < 0:
            raise InvalidInput("grace", "must not be negative")
        return self

    def params(self) -> dict[str, Any]:
        return {"scope": self.scope, "tenant": self.tenant, "job": self.job}


async def audit_lines(conn: Conn, scope: Scope) -> AsyncGenerator[Line]:
    """Every line of the audit of ``scope``, job by job in (tenant, name) order, each job's
    in slot order. Slots after the database's clock (or ``scope.now``) are not expected."""
    scope = scope.checked()
    try:
        async with conn.transaction():
            await conn.execute(b"SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
            row = await fetch_one(conn, "db_now", {"now": scope.now})
            assert row is not None
            now: datetime = row["now"]
            stop = max(scope.start, min(scope.end, now))
            cutoff = now - timedelta(seconds=scope.grace_s)
            kept = Kept(Retention.from_config(await read_config(conn)), now)
            after: tuple[str, str] | None = None
            while True:  # a page of jobs at a time: memory stays bounded by the page
                jobs, ids = await _jobs(conn, scope, after, kept)
                if not jobs:
                    return
                merges = [JobAudit(job, scope.start, stop, cutoff) for job in jobs]
                async with aclosing(_merged(conn, scope, ids, stop, merges)) as lines:
                    async for line in lines:
                        yield line
                after = (jobs[-1].tenant, jobs[-1].name)
    except psycopg.Error as exc:
        raise store_error(exc, "cannot read the ledger") from exc


async def _merged(
    conn: Conn, scope: Scope, ids: list[UUID], stop: datetime, merges: list[JobAudit]
) -> AsyncGenerator[Line]:
    """The lines of one page of jobs: their run rows streamed into their merges."""
    params = {**scope.params(), "ids": ids, "start": scope.start, "end": stop}
    done = 0  # merges closed: every job before the current one
    cursor = conn.cursor(name="pulse_audit", row_factory=tuple_row, binary=True)
    async with cursor as cur:
        await cur.execute(query("audit_runs"), params)
        async for batch in _batches(cur):
            for n, *fields in batch:
                while done < n - 1:
                    for line in merges[done].close():
                        yield line
                    done += 1
                for line in merges[n - 1].feed(_record(fields)):
                    yield line
    for merge in merges[done:]:
        for line in merge.close():
            yield line


async def _batches(cur: psycopg.AsyncServerCursor[Any]) -> AsyncGenerator[list[Any]]:
    """The cursor's rows a batch at a time, the next one asked for before this one is
    merged: the database reads it while the merge runs."""
    pending = asyncio.ensure_future(cur.fetchmany(BATCH))
    try:
        while batch := await pending:
            pending = asyncio.ensure_future(cur.fetchmany(BATCH))
            await asyncio.sleep(0)  # the next FETCH goes out before the merge
            yield batch
    finally:
        if not pending.done():
            pending.cancel()
            with contextlib.suppress(asyncio.CancelledError, psycopg.Error):
                await pending


def _record(fields: Sequence[Any]) -> Record:
    slot, status, attempt, node, token, origin, error, history, started, waited = fields
    if waited is not None:  # ["<key> <seconds>", ...]: each wait for a named limit
        waited = "waited " + ", then ".join(map(_wait, waited))
    if not history:
        return Record(slot, status, attempt, node, token, origin, error, (), started, waited)
    priors = tuple(Prior.from_json(item) for item in history)
    return Record(slot, status, attempt, node, token, origin, error, priors, started, waited)


def _wait(wait: str) -> str:
    key, _, seconds = wait.rpartition(" ")
    return f"{float(seconds):g}s for key {key}"


Revisions = list[tuple[datetime, str, dict[str, Any]]]  # (at, change, definition), oldest first


@dataclass(frozen=True)
class Kept:
    """The cluster's retention defaults and the audit's time: from which slot each job's
    records are all still kept."""

    retention: Retention
    now: datetime

    def since(self, row: Row) -> tuple[datetime | None, str]:
        """From when the records of the job of ``row`` (``audit_jobs``) are kept, and by
        which rule: slots before are past its ``keep_for`` or behind its newest
        ``keep_runs`` runs (its ``kept_runs_from``)."""
        keep = self.retention.for_job(row["keep_for_s"], row["keep_runs"])
        by_age = self.now - timedelta(seconds=keep.keep_for_s)
        by_count = row["kept_runs_from"]
        if by_count is not None and by_count > by_age:
            return by_count, f"keep_runs {keep.keep_runs}"
        return by_age, f"keep_for {format_duration(keep.keep_for_s)}"


async def _jobs(
    conn: Conn, scope: Scope, after: tuple[str, str] | None, kept: Kept
) -> tuple[list[Job], list[UUID]]:
    """The next page of jobs after (tenant, name) ``after``, with their revisions and
    chained slots."""
    page = {"after_tenant": after and after[0], "after_name": after and after[1],
            "limit": JOBS_PAGE, "keep_runs": kept.retention.keep_runs,
            "start": scope.start}  # fmt: skip
    rows = await fetch_all(conn, "audit_jobs", {**scope.params(), **page})
    ids = [r["id"] for r in rows]
    parents = {r["parent_id"] for r in rows if r["parent_id"] is not None}
    revisions: dict[UUID, Revisions] = defaultdict(list)
    chained: dict[UUID, list[datetime]] = defaultdict(list)
    standing: dict[UUID, list[Coalesced]] = defaultdict(list)
    if ids:
        revised = {**scope.params(), "ids": [*ids, *parents]}
        for r in await fetch_all(conn, "audit_revisions", revised):
            revisions[r["job_id"]].append((r["at"], r["change"], r["definition"]))
        window = {"ids": ids, "start": scope.start, "end": scope.end}
        for r in await fetch_all(conn, "audit_chained", window):
            chained[r["job_id"]].append(r["slot"])
        for r in await fetch_all(conn, "audit_skipped_from", {**scope.params(), **window}):
            standing[r["job_id"]].append(
                Coalesced(r["skipped_from"], r["scheduled_for"], r["last_error"] or "")
            )
    counted = [i for i in ids if any(d.get("max_runs") for _, _, d in revisions[i])]
    before: dict[UUID, tuple[int, datetime | None]] = {}
    if counted:
        params = {**scope.params(), "ids": counted, "start": scope.start}
        for r in await fetch_all(conn, "audit_ran_before", params):
            before[r["job_id"]] = (r["ran"], r["last"])
    jobs = [
        _job(r, _revisions(r, revisions), chained[r["id"]], standing[r["id"]], kept.since(r),
             before.get(r["id"], (0, None)))
        for r in rows
    ]  # fmt: skip
    return jobs, ids


def _revisions(row: Row, revisions: Mapping[UUID, Revisions]) -> Revisions:
    """The definitions of the job of ``row`` over time: its own revisions, or an each-zone
    child's parent's since the child was made, whose actions it follows in their
    transaction (cluster/store/jobstore/children.py), as a job that runs its slots."""
    if row["parent_id"] is None:
        return revisions.get(row["id"], [])
    made, parent = row["created_at"], revisions.get(row["parent_id"], [])
    before = [r for r in parent if r[0] <= made][-1:]
    kept = [(made, "created", before[0][2])] if before else []
    kept += [r for r in parent if r[0] > made]
    return [(at, change, {**definition, "each_zone": False}) for at, change, definition in kept]


def _job(
    row: Row,
    revisions: list[tuple[datetime, str, dict[str, Any]]],
    chained: list[datetime],
    coalesced: list[Coalesced],
    kept: tuple[datetime | None, str],
    ran_before: tuple[int, datetime | None],
) -> Job:
    spans = spans_of(revisions) if revisions else _unrevised(row)
    status = row["status"]
    held = row["gate_wait"] or row["next_run_at"] > row["slot_at"]
    held = held or row["key_wait"] or row["tenant_full"]
    in_flight = set(row["flights"])
    if status == JobStatus.RUNNING:
        in_flight.add(row["slot_at"])
    return Job(
        tenant=row["tenant_id"],
        name=row["name"],
        spans=spans,
        chained=tuple(chained),
        position=row["slot_at"] if status in (JobStatus.IDLE, JobStatus.RUNNING) else None,
        waiting=status == JobStatus.IDLE and held,
        in_flight=frozenset(in_flight),
        done_after=row["last_run_at"] if status == JobStatus.DONE else None,
        coalesced=tuple(coalesced),
        kept_from=kept[0],
        kept_by=kept[1],
        ran_before=ran_before[0],
        last_ran_before=ran_before[1],
    )


def _unrevised(row: Row) -> tuple[Span, ...]:
    """A job without revisions (one made before revisions were recorded, or a child of
    such an each-zone job): its definition as it stands, since it was made."""
    definition = {k: row[k] for k in ("schedule", "tz", "dst_repeated", "dst_skipped")}
    definition |= {"each_zone": row["each_zone"], "paused": row["paused"]}
    return spans_of([(row["created_at"], "created", definition)])
