"""Scenario sizes: the defaults of issue 6, and the tiny ``--quick`` ones for the test suite."""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields, replace
from typing import Any


@dataclass(frozen=True)
class Sizes:
    nodes: int = 3
    concurrency: int = 100  # Pulse --concurrency, and the baseline's claim limit
    shards: int = 256
    lead_s: float = 3.0  # from "every process ready" to the first slot
    drain_timeout_s: float = 120.0
    # steady (and the load under failover and rebalance)
    steady_jobs: int = 1000
    steady_every_s: int = 5
    steady_duration_s: float = 60.0
    # limits: the steady jobs, each using one of these named limits
    limits_keys: int = 10
    limits_max_concurrent: int = 20
    # burst
    burst_jobs: int = 10_000
    # fanout: one big tenant and a few small ones due at the same second, on fewer slots
    fanout_jobs: int = 10_000  # tenant A
    fanout_tenants: int = 10  # B, C, ...
    fanout_tenant_jobs: int = 10  # each
    fanout_concurrency: int = 32
    fanout_sleep_s: float = 0.05
    # fanout-once: the same with one-off (@at) jobs, on one node of few slots
    fanout_once_jobs: int = 1500  # tenant A
    fanout_once_tenants: int = 6
    fanout_once_tenant_jobs: int = 5
    fanout_once_concurrency: int = 4
    fanout_once_sleep_s: float = 0.02
    # failover: SIGKILL one node this long after the first slot
    kill_at_s: float = 20.0
    # rebalance: a node joins, then one of the first ones leaves (SIGTERM)
    join_at_s: float = 15.0
    leave_at_s: float = 35.0
    settle_timeout_s: float = 30.0
    # prune: steady on a runs table pre-filled to keep_runs, pruning every interval or never
    prune_keep_runs: int = 1000
    prune_interval_s: float = 2.0
    # scale
    scale_jobs: int = 1_000_000
    scale_due_fraction_per_min: float = 0.01
    scale_claims: int = 200
    scale_idle_s: float = 30.0
    scale_live_s: float = 60.0
    # audit: pulse audit over a week of 1,000 jobs @every 1m (10,080,000 slots)
    audit_jobs: int = 1000
    audit_every_s: int = 60
    audit_days: float = 7.0

    def params(self, *names: str) -> dict[str, Any]:
        values = asdict(self)
        common = ("nodes", "concurrency", "shards")
        return {k: values[k] for k in (*common, *names)}


DEFAULT = Sizes()
QUICK = Sizes(
    concurrency=50,
    shards=32,
    lead_s=1.5,
    drain_timeout_s=30.0,
    steady_jobs=60,
    steady_every_s=2,
    steady_duration_s=4.0,
    limits_keys=3,
    limits_max_concurrent=5,
    burst_jobs=300,
    fanout_jobs=400,
    fanout_tenant_jobs=2,
    fanout_concurrency=8,
    fanout_once_jobs=200,
    fanout_once_tenants=3,
    fanout_once_tenant_jobs=2,
    kill_at_s=1.0,
    join_at_s=0.2,
    leave_at_s=2.0,
    settle_timeout_s=15.0,
    prune_keep_runs=50,
    prune_interval_s=1.0,
    scale_jobs=20_000,
    scale_claims=20,
    scale_idle_s=1.5,
    scale_live_s=6.0,
    audit_jobs=20,
    audit_days=0.1,
)


def override(sizes: Sizes, assignments: list[str]) -> Sizes:
    """``sizes`` with ``name=value`` assignments applied (``--set steady_jobs=500``)."""
    types = {f.name: type(getattr(sizes, f.name)) for f in fields(sizes)}
    changes: dict[str, Any] = {}
    for assignment in assignments:
        name, sep, value = assignment.partition("=")
        if not sep or name not in types:
            raise ValueError(f"--set {assignment!r}: use NAME=VALUE with NAME in {sorted(types)}")
        changes[name] = types[name](value.replace("_", ""))
    return replace(sizes, **changes)
