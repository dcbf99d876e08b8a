"""The fanout scenario: one big tenant and ten small ones due at the same second, on fewer
execution slots than jobs; then the same with one-off (``@at``) jobs on one node of few
slots (``fanout_once``).

With fair fan-out, a claim that finds more jobs due in a node's shards than the node has
free slots takes them across tenants in turn (round robin over tenants, oldest first within
one), so a big tenant's burst does not hold the small tenants' jobs back until it has
drained; ``PULSE_FAIRNESS=off`` in a node's environment makes it claim strictly oldest
first. Both trials are Pulse with the same jobs and sizes: fairness on (the ``pulse`` row)
and off (the ``baseline`` row). A node that does not know the variable ignores it, and then
both trials claim oldest first.

``fanout_jobs`` jobs of tenant A and ``fanout_tenant_jobs`` of each of ``fanout_tenants``
more (B, C, ...) fall due at one second, each holding its slot ``fanout_sleep_s``, on nodes
of ``fanout_concurrency`` slots; ``fanout_once`` takes the ``fanout_once_*`` sizes, one
node, and jobs whose schedule is ``@at`` the due second. The jobs are loaded in a shuffled
order (the same every run): jobs due at the same instant are claimed in no set order, so
loading the small tenants last (or first) would make strict oldest-first look worse (or
better) than chance.

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


@dataclasses.dataclass(frozen=True)
class Shape:
    """One fan-out trial's jobs and nodes."""

    scenario: str
    jobs: int  # tenant A's
    tenants: int  # B, C, ...
    tenant_jobs: int  # each
    concurrency: int
    sleep_s: float
    nodes: int
    one_off: bool

    @classmethod
    def of(cls, sizes: Sizes, one_off: bool = False) -> Shape:
        if one_off:
            return cls(
                "fanout_once", sizes.fanout_once_jobs, sizes.fanout_once_tenants,
                sizes.fanout_once_tenant_jobs, sizes.fanout_once_concurrency,
                sizes.fanout_once_sleep_s, 1, True,
            )  # fmt: skip
        return cls(
            "fanout", sizes.fanout_jobs, sizes.fanout_tenants, sizes.fanout_tenant_jobs,
            sizes.fanout_concurrency, sizes.fanout_sleep_s, sizes.nodes, False,
        )  # fmt: skip


def tenants(shape: Shape) -> list[str]:
    """The tenant of each job, in load order: A's jobs and the small tenants', shuffled."""
    small = string.ascii_uppercase[1 : 1 + shape.tenants]
    if len(small) < shape.tenants:
        raise ValueError(f"fanout tenants: at most {len(small)}, got {shape.tenants}")
    order = [BIG] * shape.jobs
    order += [t for t in small for _ in range(shape.tenant_jobs)]
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


async def fanout(
    bench: Bench, shape: Shape, trial_name: str, node_env: Mapping[str, str]
) -> Measure:
    """One trial: every job due at one second, on nodes of ``shape.concurrency`` slots."""
    sizes = dataclasses.replace(bench.sizes, concurrency=shape.concurrency, nodes=shape.nodes)
    narrow = dataclasses.replace(bench, sizes=sizes)
    async with Trial(narrow, trial_name, "pulse", node_env=node_env) as trial:
        now = await db.db_now(trial.conn)
        owners = tenants(shape)
        payload = {"sleep_s": shape.sleep_s}
        names = await db.load_jobs(
            trial.conn, len(owners), "@every 1h", sizes.shards, now + FAR_AHEAD,
            tenants=owners, payload=payload,
        )  # fmt: skip
        measure, t0 = await fire_burst(trial, names, one_off=shape.one_off)
        measure.extra.update(figures(read_witness(trial.witness), t0))
        return measure


async def run_fanout(bench: Bench, baselines: Baselines) -> list[ScenarioResult]:
    found = []
    for shape in (Shape.of(bench.sizes), Shape.of(bench.sizes, one_off=True)):
        off = await fanout(bench, shape, f"{shape.scenario}_off", FAIRNESS_OFF)
        on = await fanout(bench, shape, shape.scenario, {})
        prefix = "fanout_once_" if shape.one_off else "fanout_"
        names = [f"{prefix}{n}" for n in ("jobs", "tenants", "tenant_jobs", "concurrency")]
        params = bench.sizes.params(*names, f"{prefix}sleep_s")
        del params["concurrency"]  # the nodes run at the shape's concurrency
        if shape.one_off:
            del params["nodes"]  # one node
        found.append(ScenarioResult(shape.scenario, params, on, off, NOTE))
    return found
