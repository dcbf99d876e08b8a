"""The failover faults of ``pulse chaos`` (pure): which combinations are allowed, their
bounds, and how the report holds a failover to its measured figure."""

from __future__ import annotations

import random
from dataclasses import replace

import pytest

from cluster.chaos.plan import Bounds, _fault, make_plan, parse_kinds
from cluster.chaos.verdict.observations import (
    Execution,
    FaultRecord,
    JobInfo,
    Observations,
    RunRecord,
)
from cluster.chaos.verdict.report import build_report, render_table
from cluster.errors import InvalidInput

BOUNDS = Bounds(kill_s=5.0, stop_s=9.0, session_timeout_s=4.0)
NODES = {"n1": "zone-a", "n2": "zone-b"}


def test_all_means_the_faults_that_apply() -> None:
    plain = parse_kinds("all", external=False)
    assert "pg-failover" not in plain and "redis-failover" not in plain
    assert "pg-stall" in plain and "redis-restart" in plain
    ha = parse_kinds("all", external=False, pg_ha=True)
    assert {"pg-failover", "redis-failover", "zone-kill"} <= set(ha)
    assert not {"pg-stall", "pg-restart", "redis-cut", "redis-restart"} & set(ha)


@pytest.mark.parametrize(
    ("faults", "external", "pg_ha", "problem"),
    [
        ("pg-failover", False, False, "needs --pg-ha"),
        ("redis-failover", True, False, "own servers"),
        ("sigkill", True, True, "excludes --external"),
        ("pg-failover,pg-stall", False, True, "single Postgres"),
        ("pg-restart", False, True, "single Postgres"),
        ("redis-failover,redis-cut", False, False, "single Redis"),
    ],
)
def test_failover_faults_refuse_what_cannot_work(
    faults: str, external: bool, pg_ha: bool, problem: str
) -> None:
    with pytest.raises(InvalidInput) as raised:
        parse_kinds(faults, external=external, pg_ha=pg_ha)
    assert problem in str(raised.value)


def test_failover_faults_and_their_bounds() -> None:
    assert parse_kinds("pg-failover,redis-failover,zone-kill", external=False, pg_ha=True) == (
        "pg-failover",
        "redis-failover",
        "zone-kill",
    )
    rng = random.Random(1)
    pg = _fault("pg-failover", 3.0, rng, NODES, BOUNDS)
    assert (pg.targets, pg.label, pg.bound_s) == ((), "postgres", 5.0)  # + promotion, measured
    redis = _fault("redis-failover", 3.0, rng, NODES, BOUNDS)
    assert (redis.label, redis.bound_s) == ("redis", BOUNDS.heartbeat_ttl_s + 5.0)
    plan = make_plan(("pg-failover", "redis-failover"), NODES, 80.0, 3, BOUNDS)
    assert {f.kind for f in plan} == {"pg-failover", "redis-failover"}


def observations(fault: FaultRecord) -> Observations:
    # One job every second, run at each slot but for a 6 s hole during the fault.
    slots = [s for s in range(100, 130) if not 111 <= s <= 116]
    return Observations(
        jobs={"j": JobInfo("j", 1, "backfill", 0.0, 0)},
        runs=[],
        executions=[Execution("j", s * 1000, 1, "n1", s + 0.05) for s in slots],
        samples=[],
        faults=[fault],
        shards=1,
        window_start=130.0,  # nothing owed in the window: only the gap is under test
        window_end=129.0,
        phase_start=100.0,
        phase_end=130.0,
        kill_bound_s=5.0,
    )


def test_a_pg_failover_is_held_to_its_promotion_time_plus_the_kill_bound() -> None:
    ok = FaultRecord("pg-failover", "postgres", (), 110.5, 120.0, 4.0 + 5.0, "n1 killed", 4.0)
    row = build_report(observations(ok), {}).faults[0]
    assert (row.max_gap_s, row.measured_s, row.ok) == (pytest.approx(6.0, abs=0.1), 4.0, True)
    assert row.job_gaps == {"j": pytest.approx(6.0, abs=0.1)}
    assert "pg-failover at +10.5s: n1 killed; longest gap of any job" in render_table(
        build_report(observations(ok), {})
    )
    short = FaultRecord("pg-failover", "postgres", (), 110.5, 120.0, 0.5 + 5.0, "", 0.5)
    assert not build_report(observations(short), {}).faults[0].ok


def test_a_redis_failover_fails_when_membership_settles_too_late() -> None:
    late = FaultRecord("redis-failover", "redis", (), 110.5, 120.0, 30.0, "", 31.0)
    assert not build_report(observations(late), {}).faults[0].ok
    fine = FaultRecord("redis-failover", "redis", (), 110.5, 120.0, 30.0, "", 4.0)
    assert build_report(observations(fine), {}).faults[0].ok


def doubled(async_replication: bool, fault_at: float = 111.0) -> Observations:
    """Slot 110 of job j: attempt 1 ran at 110.05 on n1, and again at 118 on n2 after a
    pg-failover that began at ``fault_at``."""
    first_at = 110.05
    fault = FaultRecord("pg-failover", "postgres", (), fault_at, 125.0, 40.0, "", 5.0)
    executions = [Execution("j", s * 1000, 1, "n1", s + 0.05) for s in range(100, 110)]
    executions += [Execution("j", 110_000, 1, "n1", first_at)]
    executions += [Execution("j", s * 1000, 1, "n2", 118.0) for s in range(110, 119)]
    last = {e.slot_ms: e for e in executions}
    runs = [RunRecord("j", slot, 1, e.node, "succeeded", e.at + 0.1) for slot, e in last.items()]
    return replace(
        observations(fault),
        executions=executions,
        runs=runs,
        async_replication=async_replication,
    )


def test_an_attempt_run_twice_is_a_violation_with_synchronous_replication() -> None:
    report = build_report(doubled(False), {})
    assert [v.kind for v in report.violations] == ["double execution"]
    assert report.reruns == []


def test_a_claim_lost_to_asynchronous_replication_is_attributed_to_the_failover() -> None:
    report = build_report(doubled(True), {})
    assert report.violations == []
    (rerun,) = report.reruns
    assert (rerun.cause, rerun.fault, rerun.attempts, rerun.nodes) == (
        "claim lost",
        0,
        (1, 1),
        ("n1", "n2"),
    )
    assert "claims lost           1" in render_table(report)
    # Begun long before the failover: no unreplicated commit explains it.
    early = build_report(doubled(True, fault_at=116.0), {})
    assert [v.kind for v in early.violations] == ["double execution"]
