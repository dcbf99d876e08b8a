"""The fanout scenario: one big tenant and ten small ones due at the same second, on fewer
execution slots than jobs.

With fair fan-out, a claim that finds more jobs due in a node's shards than the node has
free slots takes them across tenants in turn (round robin over tenants, oldest first within
one), so a big tenant's burst does not hold the small tenants' jobs back until it has
drained; ``PULSE_FAIRNESS=off`` in a node's environment makes it claim strictly oldest
first. Both trials are Pulse with the same jobs and sizes: fairness on (the ``pulse`` row)
and off (the ``baseline`` row). A node that does not know the variable ignores it, and then
both trials claim oldest first.

``fanout_jobs`` jobs of tenant A and ``fanout_tenant_jobs`` of each of ``fanout_tenants``
more (B, C, ...) fall due at one second, each holding its slot ``fanout_sleep_s``, on nodes
of ``fanout_concurrency`` slots. The jobs are loaded in a shuffled order (the same every
run): jobs due at the same instant are claimed in no set order, so loading the small
tenants last (or first) would make strict oldest-first look worse (or better) than chance.

Starts are the handler starts of the witness file, as every scenario's lag: the runs
table's ``started_at`` is the claim's time, which for a run claimed ahead of its slot comes
before the due second. Figures of each trial: A's drain (the due second to the start of
A's last run), the small tenants' start lag (p50, p99, max), and the share of A's drain
the last of them waited (target: at most ``SHARE_TARGET``). Across the trials: A's drain
with fairness on over off (target: at most ``DRAIN_TARGET``).
"""

from __future__ import annotations

import dataclasses
import random
import string
from collections.abc import Iterable, Mapping
from typing import Any

from bench import database as db
from bench.analysis import percentile
from bench.results import Measure, ScenarioResult
from bench.scenarios import FAR_AHEAD, Baselines, fire_burst
from bench.sizes import Sizes
from bench.trial import Bench, Trial
from cluster.chaos.witness import Execution, read_witness

BIG = "A"
SEED = 20261202  # the load order: shuffled, the same in every run
SHARE_TARGET = 0.1  # the small tenants' last start within this share of A's drain
DRAIN_TARGET = 1.1  # A's drain with fairness on over off
FAIRNESS_OFF = {"PULSE_FAIRNESS": "off"}
NOTE = "the same jobs with fairness off (PULSE_FAIRNESS=off)"


def tenants(sizes: Sizes) -> list[str]:
    """The tenant of each job, in load order: A's jobs and the small tenants', shuffled."""
    small = string.ascii_uppercase[1 : 1 + sizes.fanout_tenants]
    if len(small) < sizes.fanout_tenants:
        raise ValueError(f"fanout_tenants: at most {len(small)}, got {sizes.fanout_tenants}")
    order = [BIG] * sizes.fanout_jobs
    order += [t for t in small for _ in range(sizes.fanout_tenant_jobs)]
    random.Random(SEED).shuffle(order)
    return order


def figures(fires: Iterable[Execution], due: float) -> dict[str, Any]:
    """A's drain and the other tenants' start lag, from each job's first start of the slot
    ``due`` (epoch seconds)."""
    first: dict[str, tuple[str, float]] = {}
    for fire in fires:
        if round(fire.slot.timestamp(), 6) != round(due, 6):
            continue
        if fire.job not in first or fire.at < first[fire.job][1]:
            first[fire.job] = (fire.tenant, fire.at)
    big = [at - due for tenant, at in first.values() if tenant == BIG]
    lags_ms = [(at - due) * 1000 for tenant, at in first.values() if tenant != BIG]
    drain_s = max(big) if big else None
    lag_max_ms = max(lags_ms) if lags_ms else None
    share = None
    if drain_s and drain_s > 0 and lag_max_ms is not None:
        share = lag_max_ms / 1000 / drain_s
    return {
        "a_drain_s": drain_s,
        "others_started": len(lags_ms),
        "others_lag_p50_ms": percentile(lags_ms, 50),
        "others_lag_p99_ms": percentile(lags_ms, 99),
        "others_lag_max_ms": lag_max_ms,
        "others_share_of_a_drain": share,
    }


async def fanout(bench: Bench, scenario: str, node_env: Mapping[str, str]) -> Measure:
    """One trial: every job due at one second, on nodes of ``fanout_concurrency`` slots."""
    sizes = bench.sizes
    narrow = dataclasses.replace(
        bench, sizes=dataclasses.replace(sizes, concurrency=sizes.fanout_concurrency)
    )
    async with Trial(narrow, scenario, "pulse", node_env=node_env) as trial:
        now = await db.db_now(trial.conn)
        owners = tenants(sizes)
        payload = {"sleep_s": sizes.fanout_sleep_s}
        names = await db.load_jobs(
            trial.conn, len(owners), "@every 1h", sizes.shards, now + FAR_AHEAD,
            tenants=owners, payload=payload,
        )  # fmt: skip
        measure, t0 = await fire_burst(trial, names)
        measure.extra.update(figures(read_witness(trial.witness), t0))
        return measure


async def run_fanout(bench: Bench, baselines: Baselines) -> ScenarioResult:
    off = await fanout(bench, "fanout_off", FAIRNESS_OFF)
    on = await fanout(bench, "fanout", {})
    params = bench.sizes.params(
        "fanout_jobs", "fanout_tenants", "fanout_tenant_jobs", "fanout_concurrency",
        "fanout_sleep_s",
    )  # fmt: skip
    del params["concurrency"]  # the nodes run at fanout_concurrency
    return ScenarioResult("fanout", params, on, off, NOTE)
