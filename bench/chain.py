"""The chain scenario: half the steady jobs wait for the other half (``--after``, match
``same``), and how soon a released downstream starts; then the same with the second half
chained jobs (``@after:<upstream>``, no clock of their own).

``steady_jobs`` jobs ``@every steady_every_s`` for ``steady_duration_s``, as steady; job
``i`` of the first half is the upstream of job ``i`` of the second (edges written in SQL
before the nodes start, as ``pulse jobs apply`` would write them). Each downstream slot is
held until its upstream's slot succeeded, then released by the upstream's completion
(docs/design/gates.md). Release lag: the downstream's handler start (witness file) minus
the upstream's completion time (``runs.finished_at``, the database clock on the same host);
target p99 at most ``RELEASE_TARGET_MS``. The chained trial's slots are written by the
upstream's completion into ``chain_slots`` (docs/design/chains.md); its figures are the
gated row's ``chained_*``. The baseline row is Pulse with the same jobs and no edges.
"""

from __future__ import annotations

from typing import Any

from bench.analysis import percentile
from bench.results import ScenarioResult
from bench.scenarios import Baselines, periodic
from bench.trial import Bench, Trial, db_time, sleep_until
from cluster.chaos.witness import read_witness

RELEASE_TARGET_MS = 1000.0
NOTE = "the same jobs without dependencies"
# The chained trial's counts, carried with its release figures in the gated row's extra.
COUNTS = ("expected", "fires", "missing", "duplicates")

EDGES = """
WITH j AS (SELECT id, row_number() OVER (ORDER BY name) AS n, count(*) OVER () AS total
           FROM jobs)
INSERT INTO job_edges (downstream_id, upstream_id, match)
SELECT d.id, u.id, %(match)s FROM j u JOIN j d ON d.n = u.n + u.total / 2
WHERE u.n <= u.total / 2
"""
# A chained job as apply leaves it: no clock, idle until its upstream's first success
# (next_run_at NEVER, slot_at CHAINED_NEXT); make_due leaves it so.
CHAINED = """
UPDATE jobs d SET schedule = '@after:' || u.name, next_run_at = '9999-01-01Z',
                  slot_at = '9998-01-01Z'
FROM job_edges e JOIN jobs u ON u.id = e.upstream_id
WHERE e.downstream_id = d.id
"""


async def _edges(trial: Trial, match: str = "same") -> None:
    await trial.conn.execute(EDGES, {"match": match})
    await trial.conn.execute(
        "UPDATE jobs SET feeds = true WHERE id IN (SELECT upstream_id FROM job_edges)"
    )
    await trial.conn.execute(
        "UPDATE jobs SET gated = true WHERE id IN (SELECT downstream_id FROM job_edges)"
    )
    if match == "chain":
        await trial.conn.execute(CHAINED)


async def _chain_edges(trial: Trial) -> None:
    await _edges(trial, "chain")


async def _release_lags(trial: Trial, t0: float, procs: list[str]) -> dict[str, Any]:
    """After the window has drained: each released slot's start minus its upstream's end."""
    sizes = trial.bench.sizes
    every = sizes.steady_every_s
    last = t0 + (max(1, int(sizes.steady_duration_s // every)) - 1) * every
    await sleep_until(last)
    await trial.wait_drained(last)
    cur = await trial.conn.execute(
        "SELECT d.name AS down, r.scheduled_for, r.finished_at FROM job_edges e"
        " JOIN jobs d ON d.id = e.downstream_id JOIN runs r ON r.job_id = e.upstream_id"
        " WHERE r.status = 'succeeded' AND r.scheduled_for >= %(t0)s",
        {"t0": db_time(t0)},
    )
    ends = {
        (r["down"], r["scheduled_for"]): r["finished_at"].timestamp() for r in await cur.fetchall()
    }
    lags = [
        (e.at - ends[(e.job, e.slot)]) * 1000
        for e in read_witness(trial.witness)
        if (e.job, e.slot) in ends
    ]
    return {
        "released": len(lags),
        "release_p50_ms": percentile(lags, 50),
        "release_p99_ms": percentile(lags, 99),
        "release_max_ms": max(lags) if lags else None,
    }


async def run_chain(bench: Bench, baselines: Baselines) -> ScenarioResult:
    off = await periodic(bench, "chain_off", "pulse")
    on = await periodic(bench, "chain", "pulse", _release_lags, prepare=_edges)
    chained = await periodic(bench, "chain_chained", "pulse", _release_lags, prepare=_chain_edges)
    on.extra.update(
        {f"chained_{k}": getattr(chained, k) for k in COUNTS}
        | {f"chained_{k}": v for k, v in chained.extra.items() if k.startswith("release")}
    )
    params = bench.sizes.params("steady_jobs", "steady_every_s", "steady_duration_s")
    return ScenarioResult("chain", params, on, off, NOTE)
