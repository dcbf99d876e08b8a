"""The bare baseline: the least a SKIP LOCKED scheduler loop can do.

One connection, one loop: claim the oldest due rows of the jobs table (every shard, the
same ``FOR UPDATE SKIP LOCKED`` shape as Pulse's claim, walking the same due index), call
the witness handler inline for each, then complete them all in one statement
(``next_run_at += interval``, status idle). It sleeps until the next row falls due (the
claim reports it, as Pulse's does) or one poll interval. No membership, ring, advisory
locks, executor, leases or run history: the floor Pulse's overhead is measured against.
With ``PULSE_BENCH_CLAIM_LOG`` set, it writes each claim's start (epoch seconds) and
duration to that file when it stops, for the scale scenario's live window.

    PULSE_DATABASE_URL=... PULSE_SCHEMA=... PULSE_WITNESS_FILE=... \\
        python -m bench.baseline --name base-1 --limit 100
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import signal
import time
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any
from uuid import UUID

import psycopg
from psycopg.rows import dict_row

from cluster.chaos.witness import record
from cluster.settings import ClusterSettings
from cluster.timing.durations import parse_duration

POLL_INTERVAL_S = 1.0
WAKE_MARGIN_S = 0.002

CLAIM = """
WITH clock AS (
    SELECT coalesce(%(now)s::timestamptz, now()) AS t
),
locked AS (
    SELECT j.id FROM jobs j
    WHERE j.status = 'idle' AND j.next_run_at <= (SELECT t FROM clock)
    ORDER BY j.next_run_at
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
),
claimed AS (
    UPDATE jobs j SET status = 'running', locked_by = %(name)s
    FROM locked l
    WHERE j.id = l.id
    RETURNING j.id, j.tenant_id, j.name, j.schedule, j.slot_at, j.attempt
),
next_due AS (
    SELECT j.next_run_at AS t FROM jobs j
    WHERE j.status = 'idle' AND j.next_run_at > (SELECT t FROM clock)
    ORDER BY j.next_run_at
    LIMIT 1
)
SELECT k.t AS db_now, (SELECT t FROM next_due) AS next_due, c.*
FROM clock k LEFT JOIN claimed c ON true
"""

COMPLETE = """
UPDATE jobs j SET
    status = 'idle',
    next_run_at = j.slot_at + make_interval(secs => i.every_s),
    slot_at = j.slot_at + make_interval(secs => i.every_s),
    locked_by = NULL
FROM unnest(%(ids)s::uuid[], %(every)s::float8[]) AS i(id, every_s)
WHERE j.id = i.id
"""


@dataclass(frozen=True)
class Context:
    """The fields of Pulse's run context that the witness handler reads."""

    job_name: str
    tenant_id: str
    scheduled_for: datetime
    attempt: int
    node_id: str
    zone: str = "baseline"
    payload: dict[str, Any] = field(default_factory=dict)


_intervals: dict[str, float] = {}


def interval_s(schedule: str) -> float:
    """Seconds between slots of an ``@every`` schedule (parsed once per expression)."""
    found = _intervals.get(schedule)
    if found is None:
        if not schedule.startswith("@every "):
            raise ValueError(f"the baseline runs @every schedules only, got {schedule!r}")
        found = _intervals[schedule] = parse_duration(schedule.removeprefix("@every "))
    return found


async def claim_once(
    conn: psycopg.AsyncConnection[dict[str, Any]],
    name: str,
    limit: int,
    now: datetime | None = None,
) -> tuple[datetime, datetime | None, list[dict[str, Any]]]:
    cur = await conn.execute(CLAIM, {"limit": limit, "name": name, "now": now})
    rows = await cur.fetchall()
    jobs = [r for r in rows if r["id"] is not None]
    return rows[0]["db_now"], rows[0]["next_due"], jobs


async def ensure_index(conn: psycopg.AsyncConnection[Any]) -> None:
    """The bare loop walks every due row oldest first; Pulse's schema has no such index
    (its claim reads per shard), so the baseline brings its own."""
    async with conn.transaction():
        await conn.execute("SELECT pg_advisory_xact_lock(hashtext('pulse.bench.baseline'))")
        await conn.execute(
            "CREATE INDEX IF NOT EXISTS baseline_due ON jobs (next_run_at) WHERE status = 'idle'"
        )


async def drop_index(conn: psycopg.AsyncConnection[Any]) -> None:
    await conn.execute("DROP INDEX IF EXISTS baseline_due")


async def run(
    settings: ClusterSettings,
    name: str,
    limit: int,
    stop: asyncio.Event,
    claims: list[tuple[float, float]] | None = None,
) -> None:
    """Claim, run and complete until ``stop``; each claim's (start, seconds) is appended to
    ``claims`` if given."""
    conn = await psycopg.AsyncConnection.connect(
        settings.database_url,
        autocommit=True,
        row_factory=dict_row,
        application_name=name,
        # In UTC, as Pulse's sessions are (cluster/store/connect.py), so timestamps decode alike.
        options=f"-c search_path={settings.schema},public -c TimeZone=UTC",
        prepare_threshold=0,  # its two statements, prepared at first use (as Pulse's are)
    )
    async with conn:
        await ensure_index(conn)
        while not stop.is_set():
            started = time.monotonic()
            db_now, next_due, jobs = await claim_once(conn, name, limit)
            elapsed = time.monotonic() - started
            if claims is not None:
                claims.append((time.time() - elapsed, elapsed))
            ids: list[UUID] = []
            every: list[float] = []
            for job in jobs:
                record(Context(job["name"], job["tenant_id"], job["slot_at"], job["attempt"], name))
                ids.append(job["id"])
                every.append(interval_s(job["schedule"]))
            if ids:
                await conn.execute(COMPLETE, {"ids": ids, "every": every})
            if len(jobs) >= limit:
                continue
            delay = POLL_INTERVAL_S
            if next_due is not None:
                until = (next_due - db_now) / timedelta(seconds=1) - elapsed
                delay = min(delay, max(0.0, until + WAKE_MARGIN_S))
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), delay)


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.baseline", description=__doc__)
    parser.add_argument("--name", required=True, help="application_name and witness node id")
    parser.add_argument("--limit", type=int, default=100, help="rows claimed at most per claim")
    args = parser.parse_args()
    settings = ClusterSettings.from_env()

    claim_log = os.environ.get("PULSE_BENCH_CLAIM_LOG")
    claims: list[tuple[float, float]] | None = [] if claim_log else None

    async def serve() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        await run(settings, args.name, args.limit, stop, claims)

    asyncio.run(serve())
    if claim_log and claims:
        with open(claim_log, "w", encoding="ascii") as f:
            f.writelines(f"{at:.6f} {seconds:.6f}\n" for at, seconds in claims)


if __name__ == "__main__":
    main()
