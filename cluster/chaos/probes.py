"""The harness's own view of Postgres: lock sampling, backend termination, run history,
and ``pulse audit`` over the run's window.

These connections go straight to Postgres (never through a node's proxy) under the
application name ``pulse-chaos``. The SQL here is diagnostic, for the harness only; the
statements are in ``cluster.store.observe.diagnostics``.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from contextlib import aclosing
from datetime import datetime

from cluster.chaos.verdict.observations import (
    AuditFinding,
    LedgerRow,
    LockSample,
    RunRecord,
    to_ms,
)
from cluster.jobs.ledger import VERDICTS
from cluster.jobs.models import RunStatus
from cluster.members import MemberRegistry
from cluster.settings import ClusterSettings
from cluster.store.connect import connect
from cluster.store.jobstore.store import JobStore
from cluster.store.observe import diagnostics, ledger
from cluster.store.observe.audit import Scope, audit_lines
from cluster.store.side import SideConnection

APP_NAME = "pulse-chaos"
SAMPLE_INTERVAL_S = 0.2


class LockSampler:
    """Records which node holds each shard lock, every ``interval_s``, until stopped."""

    def __init__(self, settings: ClusterSettings, interval_s: float = SAMPLE_INTERVAL_S) -> None:
        # Its own connection, opened again after an error; a sample waits at most 2 s.
        self._conn = SideConnection(settings, APP_NAME, statement_timeout_s=1.0)
        self._interval_s = interval_s
        self.samples: list[LockSample] = []

    async def run(self, stop: asyncio.Event) -> None:
        try:
            while not stop.is_set():
                started = time.monotonic()
                holders = await diagnostics.shard_holders(self._conn)
                self.samples.append(LockSample(time.time(), holders))
                wait = self._interval_s - (time.monotonic() - started)
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), max(0.0, wait))
        finally:
            await self._conn.close()


async def terminate_backends(settings: ClusterSettings, node_id: str) -> int:
    """``pg_terminate_backend`` on every connection of ``node_id``; how many ended."""
    return await diagnostics.terminate_backends(settings, node_id, APP_NAME)


async def clock_offset(settings: ClusterSettings) -> float:
    """Database clock minus this host's clock, in seconds (best of a few round trips)."""
    async with JobStore.open(settings, APP_NAME) as store:
        best: tuple[float, float] | None = None
        for _ in range(5):
            before = time.time()
            db_now = (await store.db_now()).timestamp()
            after = time.time()
            if best is None or after - before < best[0]:
                best = (after - before, db_now - (before + after) / 2)
        assert best is not None
        return best[1]


async def wait_caught_up(
    settings: ClusterSettings, until: datetime, timeout_s: float, poll_s: float = 0.5
) -> int:
    """Wait until every job's current slot lies after ``until`` (database time): all its
    slots up to then have run or were skipped. A job that backfills a backlog can still be
    behind when the faults stop. Returns how many jobs were behind at the deadline."""
    deadline = time.monotonic() + timeout_s
    behind = -1
    while True:
        found = await diagnostics.jobs_behind(settings, until, APP_NAME)
        if found is not None:  # else Postgres just restarted: ask again
            behind = found
        if behind == 0 or time.monotonic() >= deadline:
            return behind
        await asyncio.sleep(poll_s)


async def collect(
    settings: ClusterSettings, offset_s: float
) -> tuple[dict[str, int], list[RunRecord]]:
    """(job name -> shard, every runs row with its lease token), database times moved to
    this host's clock."""
    tokens = await diagnostics.run_tokens(settings, APP_NAME)
    async with JobStore.open(settings, APP_NAME) as store:
        shards = {job.name: job.shard for job in await store.jobs()}
        runs = [
            RunRecord(
                job=r.job_name,
                slot_ms=to_ms(r.scheduled_for),
                attempt=r.attempt,
                node=r.node_id,
                status=r.status,
                finished_at=r.finished_at.timestamp() - offset_s if r.finished_at else None,
                token=tokens.get((r.job_name, r.scheduled_for)),
                started_at=r.started_at.timestamp() - offset_s if r.started_at else None,
                reason=r.last_error if r.status == RunStatus.SKIPPED else None,
            )
            for r in await store.runs(limit=10_000_000)
        ]
    return shards, runs


async def create_ledger(settings: ClusterSettings) -> None:
    """The user table the effect jobs write (``cluster.chaos.ledger``)."""
    await ledger.create(settings, APP_NAME)


async def collect_ledger(settings: ClusterSettings) -> list[LedgerRow]:
    return [
        LedgerRow(r["job"], to_ms(r["slot"]), r["attempt"], r["token"], r["node"])
        for r in await ledger.rows(settings, APP_NAME)
    ]


async def drop_cluster(settings: ClusterSettings) -> None:
    """Remove an ``--external`` run's schema and Redis keys (its name is the run's own)."""
    await diagnostics.drop_schema(settings, APP_NAME)
    registry = MemberRegistry(settings, timeout_s=5)
    try:
        await registry.forget_cluster()
    finally:
        await registry.close()


async def audit_window(
    settings: ClusterSettings, start: datetime, end: datetime
) -> tuple[dict[str, int], list[AuditFinding]]:
    """``pulse audit`` over ``[start, end)`` in database time: lines per verdict, and each
    line that is not a plain run or skip."""
    counts = dict.fromkeys(VERDICTS, 0)
    findings: list[AuditFinding] = []
    conn = await connect(settings, "chaos-audit", statement_timeout_s=120)
    try:
        scope = Scope(start, end, grace_s=0.0)
        async with aclosing(audit_lines(conn, scope)) as lines:
            async for line in lines:
                counts[line.verdict] += 1
                if line.verdict not in ("ran", "skipped"):
                    findings.append(
                        AuditFinding(line.job, to_ms(line.slot), line.verdict, line.detail)
                    )
    finally:
        await conn.close()
    return counts, findings
