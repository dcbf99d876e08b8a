"""The scale scenario: a million schedules, 1% of them due per minute.

Claim latency is measured the way a node meets it: on a connection of its own where psycopg
prepares every statement on the server at first use (``prepare_threshold=0``, as on the
node's lock session), rows read as tuples; both systems' claims are timed through that same
client. A cycle of claim (100
rows, the shards one node of three holds) then complete (each claimed job moves on to its
next slot), with the statement's ``now`` advancing by the time in which as many jobs fall
due as were claimed, so the backlog stays at one minute's worth (1% of the jobs, this
node's share of it) and every claim takes different rows. (Rolling the claims back
instead would claim the same rows every time, and their growing chains of aborted
versions dominate the timing.) Only the claim is timed, client-side, and in each cycle
the smallest durable write, the floor under a claim (``claim_cycles``). The idle claim
(nothing due yet) is what each node pays every poll; it writes nothing, and runs in
autocommit as a node's does.
The plan is ``EXPLAIN (ANALYZE, BUFFERS)`` of one more claim. The table is put back as
loaded before the other system is measured. Idle CPU: three processes with nothing due,
per process, over ``scale_idle_s``. The same processes then fire the jobs that fall due
in a live window (``scale_live.py``): what they met of their claims is the second claim
latency the scenario reports, beside the 100-row cycles'.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from psycopg.rows import tuple_row

from bench import baseline as bare
from bench import database as db
from bench.analysis import percentile
from bench.database import AConn
from bench.results import Measure, ScenarioResult
from bench.scale_live import run_live
from bench.trial import Bench, Trial
from cluster.store.lock.records import Completion, complete_params
from cluster.store.lock.session import claim_params
from cluster.store.queries import query, variant
from ring import Ring

# The due range starts this far after loading, so the idle phases have nothing due.
DUE_AFTER = timedelta(minutes=20)
WARMUP_S = 2.0
WARMUP_CLAIMS = 3
LEASE_S = 30.0
SCHEDULE = "@every 100m"
EVERY_S = 6000.0
# The least a durable write commits: one row of a table of its own, updated in place. (A
# transaction that writes no WAL but its commit record is not flushed at commit.)
COMMIT_ALONE = b"UPDATE commit_floor SET n = n + 1"


def _statement(system: str) -> bytes:
    return variant("claim", "fair", False) if system == "pulse" else bare.CLAIM.encode()


def _params(system: str, shards: list[int], limit: int, now: datetime) -> dict[str, Any]:
    if system == "pulse":
        return claim_params(shards, limit, LEASE_S, "pulse-1", "a", now)
    return {"limit": limit, "name": "base-1", "now": now}


async def _complete(conn: AConn, system: str, rows: list[dict[str, Any]], now: datetime) -> None:
    """What the system writes after running ``rows``: each job moves on one interval."""
    if not rows:
        return
    if system == "baseline":
        ids = [r["id"] for r in rows]
        await conn.execute(bare.COMPLETE, {"ids": ids, "every": [EVERY_S] * len(rows)})
        return
    done = [
        Completion(
            id=r["id"],
            token=r["lease_token"],
            slot=r["slot_at"],
            outcome="succeeded",
            error=None,
            duration_s=0.001,
            next_run_at=r["slot_at"] + timedelta(seconds=EVERY_S),
            next_slot=r["slot_at"] + timedelta(seconds=EVERY_S),
            next_attempt=1,
        )
        for r in rows
    ]
    await conn.execute(query("complete"), complete_params(done, [], "pulse-1", "a", now))


@dataclass
class Cycles:
    """Client-side milliseconds of the claims of claim/complete cycles, and of a durable
    commit alone timed in each cycle; the rows of the last claim."""

    claims_ms: list[float] = field(default_factory=list)
    commits_ms: list[float] = field(default_factory=list)
    claimed: int = 0


async def claim_cycles(
    conn: AConn,
    claims: AConn,
    system: str,
    shards: list[int],
    limit: int,
    start: datetime,
    step_s: float,
    samples: int,
) -> Cycles:
    """``samples`` claim/complete cycles on ``claims``, ``now`` advancing ``step_s`` per
    cycle; the completions go through ``conn``.

    A claim writes, so it commits only once its WAL is on disk: the disk's flush latency is
    a floor under every claim, with a tail of its own. Each cycle also times the smallest
    durable write (``COMMIT_ALONE``) through the same client, so that floor is measured
    beside the claims it bounds."""
    await conn.execute("CREATE TABLE IF NOT EXISTS commit_floor (n bigint NOT NULL)")
    await conn.execute("INSERT INTO commit_floor SELECT 0 WHERE NOT EXISTS (TABLE commit_floor)")
    statement = _statement(system)
    cycles = Cycles()
    for i in range(WARMUP_CLAIMS + samples):
        now = start + timedelta(seconds=i * step_s)
        params = _params(system, shards, limit, now)
        cur = claims.cursor(row_factory=tuple_row)
        started = time.perf_counter()
        # Rows as tuples, as a node reads them; named afterwards, untimed.
        await cur.execute(statement, params)
        found = await cur.fetchall()
        claim_ms = (time.perf_counter() - started) * 1000
        names = [c.name for c in cur.description or ()]
        rows = [r for r in (dict(zip(names, t, strict=True)) for t in found) if r["id"]]
        cycles.claimed = len(rows)
        await _complete(conn, system, rows, now)
        started = time.perf_counter()
        await claims.execute(COMMIT_ALONE)
        commit_ms = (time.perf_counter() - started) * 1000
        if i >= WARMUP_CLAIMS:
            cycles.claims_ms.append(claim_ms)
            cycles.commits_ms.append(commit_ms)
    return cycles


async def idle_claims_ms(
    claims: AConn, system: str, params: dict[str, Any], samples: int
) -> list[float]:
    times = []
    for _ in range(samples):
        cur = claims.cursor(row_factory=tuple_row)
        started = time.perf_counter()
        await cur.execute(_statement(system), params)
        found = await cur.fetchall()
        times.append((time.perf_counter() - started) * 1000)
        assert cur.description is not None
        at = [c.name for c in cur.description].index("id")
        if any(row[at] is not None for row in found):
            raise RuntimeError("an idle claim took a job: nothing should be due yet")
    return times


async def explain(conn: AConn, system: str, params: dict[str, Any]) -> list[str]:
    async with conn.transaction(force_rollback=True):
        cur = await conn.execute(b"EXPLAIN (ANALYZE, BUFFERS) " + _statement(system), params)
        return [str(next(iter(r.values()))) for r in await cur.fetchall()]


async def restore(conn: AConn, first: datetime, spread_s: float, count: int) -> None:
    """Every job back to idle at the due time it was loaded with; no run history."""
    await conn.execute(
        """
        WITH loaded AS (
            SELECT id, %(first)s::timestamptz
                       + make_interval(secs => %(spread)s * substr(name, 2)::int / %(n)s) AS t
            FROM jobs
        )
        UPDATE jobs j SET status = 'idle', next_run_at = l.t, slot_at = l.t, locked_by = NULL,
                          locked_at = NULL, locked_zone = NULL, lease_expires_at = NULL
        FROM loaded l
        WHERE j.id = l.id AND (j.next_run_at <> l.t OR j.status <> 'idle')
        """,
        {"first": first, "spread": spread_s, "n": count},
    )
    await conn.execute("TRUNCATE runs")
    await conn.execute("VACUUM ANALYZE jobs, runs")


async def _idle_cpu(trial: Trial, procs: list[str], idle_s: float) -> dict[str, Any]:
    ready_s = await trial.wait_ready(procs)
    await asyncio.sleep(min(WARMUP_S, idle_s))
    cpu0 = await trial.sampler.mark()
    await asyncio.sleep(idle_s)
    cpu1 = await trial.sampler.mark()
    trial.check_alive(procs)
    return {
        "ready_s": round(ready_s, 3),
        "idle_node_cpu_pct": (cpu1[0] - cpu0[0]) / idle_s / len(procs) * 100,
        "idle_pg_cpu_pct": (cpu1[1] - cpu0[1]) / idle_s * 100,
    }


async def run_scale(bench: Bench, baselines: object) -> ScenarioResult:
    sizes = bench.sizes
    spread_s = 60 / sizes.scale_due_fraction_per_min
    due_per_s = sizes.scale_jobs / spread_s
    limit = sizes.concurrency
    measures = {}
    async with Trial(bench, "scale", "data") as data:
        first = await db.db_now(data.conn) + DUE_AFTER
        started = time.monotonic()
        await db.load_jobs(
            data.conn, sizes.scale_jobs, SCHEDULE, sizes.shards, first, spread_s=spread_s
        )
        load_s = time.monotonic() - started
        nodes = [f"pulse-{i}" for i in range(1, sizes.nodes + 1)]
        held = sorted(Ring(nodes).owned(nodes[0], sizes.shards))
        # One minute into the due range: 1% of the jobs are due.
        due_now = first + timedelta(minutes=1)
        idle_now = first - timedelta(seconds=1)
        # Prepares its statements as a node's lock session does; autocommit, never rolled
        # back, so psycopg keeps them.
        claims = await db.control(data.settings)
        claims.prepare_threshold = 0
        try:
            for system in ("baseline", "pulse"):
                if system == "baseline":
                    await bare.ensure_index(data.conn)
                else:
                    await bare.drop_index(data.conn)  # Pulse pays no write cost for it
                share = len(held) / sizes.shards if system == "pulse" else 1.0
                step_s = limit / (due_per_s * share)
                cycles = await claim_cycles(
                    data.conn, claims, system, held, limit, due_now, step_s, sizes.scale_claims
                )
                end = due_now + timedelta(seconds=(WARMUP_CLAIMS + sizes.scale_claims) * step_s)
                idle = _params(system, held, limit, idle_now)
                quiet = await idle_claims_ms(claims, system, idle, sizes.scale_claims)
                measures[system] = Measure(
                    system=system,
                    extra={
                        "claim_p50_ms": percentile(cycles.claims_ms, 50),
                        "claim_p99_ms": percentile(cycles.claims_ms, 99),
                        "claimed_rows": cycles.claimed,
                        "commit_p50_ms": percentile(cycles.commits_ms, 50),
                        "commit_p99_ms": percentile(cycles.commits_ms, 99),
                        "idle_claim_p50_ms": percentile(quiet, 50),
                        "idle_claim_p99_ms": percentile(quiet, 99),
                        "plan": await explain(data.conn, system, _params(system, held, limit, end)),
                        "load_s": round(load_s, 1),
                    },
                )
                await restore(data.conn, first, spread_s, sizes.scale_jobs)
        finally:
            await claims.close()
        for system in ("baseline", "pulse"):
            if system == "pulse":
                await bare.drop_index(data.conn)  # the baseline's workers created it
            # Three processes on the loaded table, under a cluster name of their own: idle,
            # then firing what falls due in the live window.
            async with Trial(bench, "scale", system, schema=data.schema) as trial:
                procs = trial.start_all()
                idle_cpu = await _idle_cpu(trial, procs, sizes.scale_idle_s)
                live = await run_live(trial, procs, sizes.scale_jobs, spread_s)
            live.extra.update(measures[system].extra)
            live.extra.update(idle_cpu)
            measures[system] = live
    params = sizes.params("scale_jobs", "scale_due_fraction_per_min", "scale_claims")
    params.update(scale_idle_s=sizes.scale_idle_s, scale_live_s=sizes.scale_live_s)
    return ScenarioResult("scale", params, measures["pulse"], measures["baseline"])
