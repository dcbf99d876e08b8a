"""The prune scenario: steady with pruning at work, against the same steady without it.

Both trials are Pulse's steady scenario (``steady_jobs`` jobs ``@every steady_every_s``)
on a runs table pre-filled with ``prune_keep_runs`` + 1 past runs per job (slots up to
the loaded jobs' first), as a cluster that has run for a while at ``keep_runs`` (1,000 by
default) holds it: the first pass has a little to delete, and every run completed in the
window pushes one more over the count, so each pass has work. One trial prunes every
``prune_interval_s``, the other does not prune at all (``--prune-interval 0``), and the
ratio is pruning / not pruning: what pruning costs the claim path and the nodes' CPU.
"""

from __future__ import annotations

from bench.results import ScenarioResult
from bench.scenarios import Baselines, periodic
from bench.trial import Bench, Trial
from cluster.store.config import write_config
from cluster.timing.durations import format_duration

NOTE = "the same steady, runs table pre-filled, with pruning off (--prune-interval 0)"

# Slots of the history: multiples of the interval (as @every's are) before the loaded
# jobs' first one, which lies a day ahead.
PREFILL = """
INSERT INTO runs (job_id, tenant_id, job_name, scheduled_for, attempt, node_id, zone, status,
                  started_at, finished_at, duration_s)
SELECT j.id, j.tenant_id, j.name, s.t, 1, 'pulse-1', 'a', 'succeeded', s.t, s.t, 0.001
FROM jobs j
CROSS JOIN LATERAL (
    SELECT to_timestamp((floor(extract(epoch FROM now()) / %(every)s) - k) * %(every)s) AS t
    FROM generate_series(1, %(runs)s) AS k
) AS s
"""


async def prefill(trial: Trial) -> None:
    sizes = trial.bench.sizes
    await write_config(trial.conn, "keep_runs", str(sizes.prune_keep_runs))
    await trial.conn.execute(
        PREFILL, {"every": sizes.steady_every_s, "runs": sizes.prune_keep_runs + 1}
    )
    await trial.conn.execute("VACUUM ANALYZE runs")


async def run_prune(bench: Bench, baselines: Baselines) -> ScenarioResult:
    interval = format_duration(bench.sizes.prune_interval_s)
    off = await periodic(
        bench, "prune_off", "pulse", prepare=prefill, node_options=("--prune-interval", "0")
    )
    on = await periodic(
        bench, "prune", "pulse", prepare=prefill, node_options=("--prune-interval", interval)
    )
    params = bench.sizes.params(
        "steady_jobs", "steady_every_s", "steady_duration_s", "prune_keep_runs",
        "prune_interval_s",
    )  # fmt: skip
    return ScenarioResult("prune", params, on, off, NOTE)
