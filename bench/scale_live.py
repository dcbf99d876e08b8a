"""The scale scenario's live window: the processes fire what falls due of a million jobs.

After the idle measurement, with the same processes running, the jobs that fall due in
the next ``scale_live_s`` at the scenario's rate (1% of the jobs per minute) get their
slots in that window, spread evenly as they were loaded; every other job stays where it
was loaded (due from 20 minutes after loading on, minutes after the window), so the
claims run against the whole table with nothing else due. Each job has one slot in the
window: its schedule's next slot lies well beyond it. Fires, misses, duplicates, lag and
CPU are counted as in the other scenarios.

Claim latency is what each process measured of its own claims, over the window: a Pulse
node's claim-duration histogram from its metrics endpoint, and the baseline worker's claim
times (written when it stops), put in the same buckets. Both quantiles come from the
buckets, interpolated inside one; the share of claims within 5 ms is exact (a bound). A
node keeps its last 4,096 durations between two reads of its endpoint, so it is read
every few seconds.
"""

from __future__ import annotations

import asyncio
import math
import time
from datetime import datetime, timedelta

from bench import database as db
from bench.analysis import bucket_quantile, count, histogram, merge, since
from bench.database import AConn
from bench.results import Measure
from bench.trial import BenchError, Trial, sleep_until
from node.metrics import CLAIM_BUCKETS

SCRAPE_EVERY_S = 5.0
DRAIN_POLL_S = 0.1
MIN_EVERY_S = 6000  # the loaded jobs' interval (@every 100m)
WITHIN_S = 0.005
STALL_S = 0.05


def window_schedule(first: float, last: float, margin_s: float) -> str:
    """An ``@every`` schedule (slots are multiples of the interval since the epoch) with no
    slot in ``(first, last + margin_s]``: a job first due in the window runs once in it."""
    every = MIN_EVERY_S
    while every - first % every <= last - first + margin_s:
        every += 1
    return f"@every {every}s"


def window_size(count: int, spread_s: float, live_s: float) -> int:
    """How many of ``count`` jobs, due evenly over ``spread_s``, fall due in ``live_s``."""
    return min(count, math.ceil(count * live_s / spread_s))


async def shift_window(
    conn: AConn, count: int, spread_s: float, size: int, start: datetime, schedule: str
) -> dict[str, datetime]:
    """The first ``size`` jobs become due from ``start``, ``spread_s / count`` apart, idle,
    on ``schedule``; returns each one's slot."""
    cur = await conn.execute(
        """
        UPDATE jobs j SET next_run_at = w.t, slot_at = w.t, schedule = %(schedule)s,
                          status = 'idle', locked_by = NULL, locked_at = NULL,
                          locked_zone = NULL, lease_expires_at = NULL
        FROM (SELECT id, %(start)s::timestamptz
                         + make_interval(secs => %(spread)s * substr(name, 2)::int / %(n)s) AS t
              FROM jobs WHERE tenant_id = 'default' AND name < %(end)s) AS w
        WHERE j.id = w.id
        RETURNING j.name, w.t
        """,
        {
            "start": start,
            "spread": spread_s,
            "n": count,
            "end": db.job_name(size),
            "schedule": schedule,
        },
    )
    return {row["name"]: row["t"] for row in await cur.fetchall()}


async def _unfinished(conn: AConn, size: int, last: datetime) -> int:
    cur = await conn.execute(
        "SELECT count(*) AS n FROM jobs"
        " WHERE tenant_id = 'default' AND name < %(end)s AND slot_at <= %(t)s",
        {"end": db.job_name(size), "t": last},
    )
    row = await cur.fetchone()
    return int(row["n"]) if row else 0


async def _wait_drained(trial: Trial, size: int, last: datetime) -> float | None:
    deadline = time.monotonic() + trial.bench.sizes.drain_timeout_s
    while time.monotonic() < deadline:
        if await _unfinished(trial.conn, size, last) == 0:
            return time.time() - last.timestamp()
        await asyncio.sleep(DRAIN_POLL_S)
    return None


def claim_figures(h: dict[float, float]) -> dict[str, float | None]:
    total = h.get(math.inf, 0.0)
    p50, p99 = bucket_quantile(h, 50), bucket_quantile(h, 99)
    return {
        "live_claims": total,
        "live_claim_p50_ms": None if p50 is None else p50 * 1000,
        "live_claim_p99_ms": None if p99 is None else p99 * 1000,
        "live_claims_within_5ms": h[WITHIN_S] / total if total else None,
        # A stall of the machine (a slow disk flush, say) holds up one claim per process
        # whatever the claim rate. Pulse claims in batches, a twentieth as often as the
        # bare loop here, so each stall weighs that much more in its percentiles; the
        # count of slow claims compares the two systems like with like.
        "live_claims_over_50ms": total - h[STALL_S],
    }


async def run_live(trial: Trial, procs: list[str], jobs: int, spread_s: float) -> Measure:
    """The live window on ``trial``'s running processes; stops them."""
    sizes = trial.bench.sizes
    size = window_size(jobs, spread_s, sizes.scale_live_s)
    start = await db.db_now(trial.conn) + timedelta(seconds=sizes.lead_s)
    end = start + timedelta(seconds=sizes.scale_live_s)
    schedule = window_schedule(start.timestamp(), end.timestamp(), sizes.drain_timeout_s)
    slots = await shift_window(trial.conn, jobs, spread_s, size, start, schedule)
    if not slots:
        raise BenchError("scale: no job falls due in the live window")
    cpu0 = await trial.sampler.mark()
    buckets0 = await trial.claim_buckets()
    marked = time.time()
    last = max(slots.values())
    while time.time() < last.timestamp():
        await sleep_until(min(time.time() + SCRAPE_EVERY_S, last.timestamp()))
        await trial.claim_buckets()  # a node files its durations in buckets when read
    drain_s = await _wait_drained(trial, size, last)
    cpu1 = await trial.sampler.mark()
    buckets1 = await trial.claim_buckets()
    ended = time.time()
    trial.check_alive(procs)
    await trial.stop()
    if trial.system == "pulse":
        claims = merge(since(h, buckets0.get(name, {})) for name, h in buckets1.items())
    else:
        claims = histogram(trial.baseline_claims(marked, ended), CLAIM_BUCKETS)
    expected = {(name, round(t.timestamp(), 6)) for name, t in slots.items()}
    extra = {"live_s": sizes.scale_live_s, **claim_figures(claims)}
    return trial.measure(count(trial.fires(), expected), drain_s, (cpu0, cpu1), extra)
