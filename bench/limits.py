"""The limits scenario: the steady load (``steady_jobs`` jobs ``@every steady_every_s``)
with every job using one of ``limits_keys`` named limits of ``limits_max_concurrent`` runs
at once each, against the same jobs without keys (docs/limits.md, docs/design/limits.md).

The jobs of one key fall due at the same second, more of them than the key lets run at
once, so most slots wait for their key: a run that ends gives its place back and wakes the
claim loops, which take the next. Both trials are Pulse with the same jobs and sizes: with
keys (the ``pulse`` row) and without (the ``baseline`` row). The figures: the start lag of
every slot (slot -> handler start, the witness file) with keys and without, so their
difference is what waiting for a key costs; the slots that waited (``limit_waits``) and
how long; and the Postgres CPU per 1,000 fires with keys over without (target: at most
``PG_CPU_TARGET``).
"""

from __future__ import annotations

from typing import Any

from bench.results import ScenarioResult
from bench.scenarios import Baselines, periodic
from bench.trial import Bench, Trial, sleep_until

PG_CPU_TARGET = 1.3  # Postgres CPU per 1,000 fires, with keys over without
NOTE = "the same jobs without keys"


def _keys(bench: Bench) -> list[str]:
    return [f"key-{k}" for k in range(bench.sizes.limits_keys)]


async def _prepare(bench: Bench, trial: Trial) -> None:
    """The keys, and every job using one of them (job i the key i mod keys)."""
    for key in _keys(bench):
        await trial.conn.execute(
            "INSERT INTO limit_keys (name, max_concurrent) VALUES (%s, %s)",
            (key, bench.sizes.limits_max_concurrent),
        )
    await trial.conn.execute(
        "UPDATE jobs j SET uses = ARRAY['key-' || (n.i %% %s)] FROM"
        " (SELECT id, row_number() OVER (ORDER BY name) AS i FROM jobs) AS n WHERE n.id = j.id",
        (bench.sizes.limits_keys,),
    )
    await trial.conn.execute("VACUUM ANALYZE jobs")


async def _waits(trial: Trial, t0: float, names: list[str]) -> dict[str, Any]:
    """After the window: the slots that waited for a key, and how long."""
    sizes = trial.bench.sizes
    await sleep_until(t0 + sizes.steady_duration_s + sizes.steady_every_s)
    cur = await trial.conn.execute(
        "SELECT count(*) AS n,"
        " percentile_cont(0.5) WITHIN GROUP (ORDER BY extract(epoch FROM ended - since)) AS p50,"
        " percentile_cont(0.99) WITHIN GROUP (ORDER BY extract(epoch FROM ended - since)) AS p99"
        " FROM limit_waits WHERE ended IS NOT NULL"
    )
    row = await cur.fetchone()
    assert row is not None
    ms = {k: None if row[k] is None else round(float(row[k]) * 1000, 1) for k in ("p50", "p99")}
    return {"slots_waited": row["n"], "wait_p50_ms": ms["p50"], "wait_p99_ms": ms["p99"]}


async def run_limits(bench: Bench, baselines: Baselines) -> ScenarioResult:
    async def prepare(trial: Trial) -> None:
        await _prepare(bench, trial)

    without = await periodic(bench, "limits_off", "pulse")
    keyed = await periodic(bench, "limits", "pulse", _waits, prepare=prepare)
    params = bench.sizes.params(
        "steady_jobs", "steady_every_s", "steady_duration_s", "limits_keys",
        "limits_max_concurrent",
    )  # fmt: skip
    if keyed.pg_cpu_per_1k_s and without.pg_cpu_per_1k_s:
        ratio = keyed.pg_cpu_per_1k_s / without.pg_cpu_per_1k_s
        keyed.extra["pg_cpu_target_met"] = ratio <= PG_CPU_TARGET
    return ScenarioResult("limits", params, keyed, without, NOTE)
