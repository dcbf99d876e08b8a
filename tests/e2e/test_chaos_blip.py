"""``pulse chaos --faults pg-blip,sigkill``: a 1.5 s cut of one node's Postgres connections
next to a SIGKILL. The blipped node keeps its Redis connection and heartbeat, so the others
must tell it from the killed one: its shards go to nobody else (``blips move no shard``),
while the killed node's move. No violation and no lost slot (how soon each failover came
is pulse chaos's and the bench's to judge)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers.chaosrun import run_chaos, servers_available


@pytest.mark.e2e
@pytest.mark.slow
@pytest.mark.timeout(180)
@pytest.mark.skipif(not servers_available(), reason="needs postgres/initdb and redis-server")
def test_a_blip_moves_no_shard_while_a_death_moves_them(tmp_path: Path) -> None:
    report, table, code = run_chaos(
        tmp_path,
        "--nodes", "3", "--zones", "3", "--jobs", "80", "--seed", "11",
        "--duration", "45s", "--quiet", "10s", "--session-timeout", "4s",
        "--faults", "pg-blip,sigkill",
        timeout_s=170,
    )  # fmt: skip
    assert report["violations"] == [], table
    assert report["lost"] == [], table
    assert report["node_exits"] == [], table
    kinds = [row["kind"] for row in report["faults"]]
    assert "pg-blip" in kinds and "sigkill" in kinds, table
    checks = {check["name"]: check for check in report["checks"]}
    blips = checks["blips move no shard"]
    assert blips["violations"] == [], table
    assert blips["summary"].endswith(", 0 shards moved"), table
    assert code in (0, 1), table  # 1: a bound passed: pulse chaos's and the bench's to judge
