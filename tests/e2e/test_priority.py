"""Priorities on a real node (docs/design/fairness.md, "Priorities"): with more due than it
can run, a node runs a tenant's job with a priority before the tenant's other due jobs, and
a tenant whose every job has the highest priority still takes turns with the others."""

from __future__ import annotations

import pytest

from cluster.jobs.spec import JobSpec
from cluster.settings import ClusterSettings
from tests.helpers.fleet import Fleet
from tests.helpers.nodes import init_cluster
from tests.helpers.waiting import until

HOLD = {"sleep_s": 1.0}


def job(name: str, tenant: str, priority: int = 0) -> JobSpec:
    return JobSpec.build(name, "@every 10s", "cluster.chaos.witness:record", tenant=tenant,
                         payload=HOLD, priority=priority)  # fmt: skip


@pytest.mark.e2e
def test_a_node_runs_a_tenants_priority_first_and_the_tenants_in_turn(
    settings: ClusterSettings, fleet: Fleet
) -> None:
    quiet = [job(f"quiet-{i}", "quiet") for i in range(5)] + [job("quiet-urgent", "quiet", 50)]
    loud = [job(f"loud-{i}", "loud", 100) for i in range(6)]
    init_cluster(settings, *quiet, *loud)  # one clock reading: every first slot is the same
    fleet.start("n1", "a", "--concurrency", "3")

    def first_slot_runs() -> list[tuple[float, str, str]] | None:
        runs = fleet.executions()
        if not runs:
            return None
        first = min(r.slot for r in runs)
        done = sorted((r.at, r.tenant, r.job) for r in runs if r.slot == first)
        return done if len(done) == 12 else None

    order = until(first_slot_runs, "the twelve jobs' first slot to run", 60)
    fleet.stop_all()
    # The node's first claim took three places: each tenant's first turn, then a second
    # turn of one of them by lot. The quiet tenant's first went to its job with a priority.
    first_claim = order[:3]
    assert {tenant for _, tenant, _ in first_claim} == {"quiet", "loud"}, order
    # (The runs of one claim start together, in any order.)
    assert "quiet-urgent" in {name for _, _, name in first_claim}, order
