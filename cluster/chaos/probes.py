"""The harness's own view of Postgres: lock sampling, backend termination, run history.

These connections go straight to Postgres (never through a node's proxy) under the
application name ``pulse-chaos``. The SQL here is diagnostic, for the harness only; the
runtime statements of nodes stay in ``cluster/queries.sql``.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from datetime import datetime

import psycopg
import redis.asyncio as aioredis
from psycopg import sql

from cluster.chaos.observations import LockSample, RunRecord, to_ms
from cluster.db import Conn, connect
from cluster.errors import StoreError
from cluster.jobs import JobStore
from cluster.queries import query
from cluster.settings import ClusterSettings

APP_NAME = "pulse-chaos"
SAMPLE_INTERVAL_S = 0.2

TERMINATE = """
SELECT count(*) FILTER (WHERE pg_terminate_backend(pid)) AS n FROM pg_stat_activity
WHERE application_name = %(node)s OR starts_with(application_name, %(prefix)s)
"""


class LockSampler:
    """Records which node holds each shard lock, every ``interval_s``, until stopped."""

    def __init__(self, settings: ClusterSettings, interval_s: float = SAMPLE_INTERVAL_S) -> None:
        self._settings = settings
        self._interval_s = interval_s
        self.samples: list[LockSample] = []

    async def _sample(self, conn: Conn) -> dict[int, str]:
        async with asyncio.timeout(2.0):
            cur = await conn.execute(query("shard_holders"), {"ns": self._settings.lock_namespace})
            rows = await cur.fetchall()
        return {row["shard"]: row["node_id"] for row in rows}

    async def run(self, stop: asyncio.Event) -> None:
        conn: Conn | None = None
        try:
            while not stop.is_set():
                started = time.monotonic()
                holders: dict[int, str] | None = None
                try:
                    if conn is None or conn.closed:
                        async with asyncio.timeout(2.0):
                            conn = await connect(self._settings, APP_NAME, statement_timeout_s=2)
                    holders = await self._sample(conn)
                except (StoreError, psycopg.Error, OSError, TimeoutError):
                    if conn is not None:
                        await conn.close()
                    conn = None
                self.samples.append(LockSample(time.time(), holders))
                wait = self._interval_s - (time.monotonic() - started)
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), max(0.0, wait))
        finally:
            if conn is not None:
                await conn.close()


async def terminate_backends(settings: ClusterSettings, node_id: str) -> int:
    """``pg_terminate_backend`` on every connection of ``node_id``; how many ended."""
    conn = await connect(settings, APP_NAME, statement_timeout_s=5)
    try:
        cur = await conn.execute(TERMINATE.encode(), {"node": node_id, "prefix": f"{node_id}/"})
        row = await cur.fetchone()
        return int(row["n"]) if row else 0
    finally:
        await conn.close()


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


BEHIND = """
SELECT count(*)::int AS n FROM jobs WHERE status <> 'paused' AND slot_at <= %(until)s
"""


async def wait_caught_up(
    settings: ClusterSettings, until: datetime, timeout_s: float, poll_s: float = 0.5
) -> int:
    """Wait until every job's current slot lies after ``until`` (database time): all its
    slots up to then have run or were skipped. A job that backfills a backlog can still be
    behind when the faults stop. Returns how many jobs were behind at the deadline."""
    deadline = time.monotonic() + timeout_s
    behind = -1
    while True:
        try:
            conn = await connect(settings, APP_NAME, statement_timeout_s=5)
            try:
                cur = await conn.execute(BEHIND, {"until": until})
                row = await cur.fetchone()
            finally:
                await conn.close()
            behind = row["n"] if row else 0
        except (StoreError, psycopg.Error, OSError):
            pass  # Postgres just restarted: ask again
        if behind == 0 or time.monotonic() >= deadline:
            return behind
        await asyncio.sleep(poll_s)


async def collect(
    settings: ClusterSettings, offset_s: float
) -> tuple[dict[str, int], list[RunRecord]]:
    """(job name -> shard, every runs row), database times moved to this host's clock."""
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
            )
            for r in await store.runs(limit=10_000_000)
        ]
    return shards, runs


async def drop_cluster(settings: ClusterSettings) -> None:
    """Remove an ``--external`` run's schema and Redis keys (its name is the run's own)."""
    conn = await connect(settings, APP_NAME, statement_timeout_s=30)
    try:
        await conn.execute(
            sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(settings.schema))
        )
    finally:
        await conn.close()
    client = aioredis.Redis.from_url(settings.redis_url, socket_timeout=5)
    try:
        keys = [key async for key in client.scan_iter(match=settings.key_prefix + "*")]
        if keys:
            await client.delete(*keys)
    finally:
        await client.aclose()
