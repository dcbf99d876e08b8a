"""``pulse chaos --pg-ha`` with the failover faults: a Postgres primary lost to a
pg_auto_failover promotion and a Redis primary lost to a Sentinel promotion, under a
seeded workload on two nodes, must lose no slot, claim no attempt twice, keep every job's
gap within the measured promotion time + 5 s (Postgres) and membership settled within the
heartbeat TTL + 5 s (Redis), and report those figures.

It costs about 60-70 s (10 s of it the formation); it is skipped, saying why, only when
pg_auto_failover or redis-sentinel is missing and cannot be installed here.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from cluster.chaos.servers.packages import PackagesMissing, ensure_command
from cluster.chaos.servers.pgha import PACKAGES
from tests.helpers.chaosrun import run_chaos

FAULTS = ("pg-failover", "redis-failover")


def _packages() -> str | None:
    try:
        ensure_command("pg_autoctl", *PACKAGES)
        ensure_command("redis-sentinel", "redis-sentinel")
    except PackagesMissing as exc:
        return str(exc)
    return None


@pytest.mark.e2e
@pytest.mark.slow
@pytest.mark.timeout(240)
def test_a_chaos_run_through_both_failovers_keeps_every_guarantee(tmp_path: Path) -> None:
    missing = _packages()
    if missing:
        pytest.skip(f"failover servers are not available: {missing}")
    report, table, code = run_chaos(
        tmp_path,
        "--pg-ha",
        "--nodes", "2", "--zones", "2", "--jobs", "30", "--shards", "8", "--seed", "11",
        "--duration", "45s", "--quiet", "6s", "--session-timeout", "4s",
        "--faults", ",".join(FAULTS),
        timeout_s=230,
    )  # fmt: skip

    assert report["settings"]["pg_ha"] and report["settings"]["redis_sentinel"], table
    assert report["violations"] == [], table
    assert report["lost"] == [], table
    assert report["node_exits"] == [], table
    assert [row["kind"] for row in report["faults"]] == list(FAULTS), table
    for row in report["faults"]:
        assert row["measured_s"] is not None and row["job_gaps"], table
        assert max(row["job_gaps"].values()) == row["max_gap_s"], table
    pg = report["faults"][0]
    assert pg["bound_s"] == pytest.approx(pg["measured_s"] + 5.0, abs=0.1), table
    assert "promoted in" in pg["detail"], table
    assert report["passed"] and code == 0, table
    print(table)
