"""A rolling upgrade from the previous release loses and doubles no slot.

Nodes of the previous release (its code unpacked from git, ``tests/helpers/releases.py``, run
with the same interpreter) fire jobs every second on the schema its own `pulse init` made.
This tree's `pulse init` migrates the schema under them; a node of the previous release
started now is refused with one line. Two nodes of this tree join, then the old nodes leave
one by one (SIGTERM), each waited for and its shards held again before the next. Every slot
from before the migration until the last old node has left runs exactly once: a succeeded
run row at its first attempt, one execution in the witness file. No assertion is about
speed; lags are printed. What old nodes call is also checked statement by statement by
tests/integration/test_previous_release.py. While an old node runs, an every-node job is
refused (it would run on one node), and made once the last has left.
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import time
from datetime import datetime, timedelta
from pathlib import Path
from subprocess import CompletedProcess

import pytest

from cluster.local.processes import pulse_env
from cluster.settings import ClusterSettings
from ring import Ring
from tests.helpers.cli import spawn
from tests.helpers.fleet import Fleet, doubles, every_slots
from tests.helpers.releases import PREVIOUS, extract, needs_history
from tests.helpers.waiting import until

pytestmark = [pytest.mark.e2e, pytest.mark.slow, needs_history, pytest.mark.timeout(300)]

SHARDS = 16
JOBS = 40
OLD = ("old-1", "old-2", "old-3")
NEW = ("new-1", "new-2")


def previous_pulse(tree: Path, settings: ClusterSettings, *args: str) -> CompletedProcess[str]:
    """``pulse ARGS`` of the previous release, run to its end."""
    return subprocess.run(
        [sys.executable, "-m", "node", *args],
        cwd=tree,
        env=pulse_env(settings, PYTHONPATH=str(tree)),
        capture_output=True,
        text=True,
        timeout=60,
    )


def held_by(fleet: Fleet, *nodes: str) -> None:
    """Wait until every shard is held by its owner on the ring of ``nodes``."""
    ring = Ring(sorted(nodes))
    owners = {shard: node for node in nodes for shard in ring.owned(node, SHARDS)}

    def settled() -> bool:
        fleet.check_alive()
        return fleet.holders() == owners

    try:
        until(settled, f"every shard held by its owner among {sorted(nodes)}", 60)
    except AssertionError as exc:
        raise AssertionError(f"{exc}\n{fleet.logs()}") from None


def db_now(fleet: Fleet) -> datetime:
    value: datetime = fleet.sql("SELECT now() AS t")[0]["t"]
    return value


def pause(fleet: Fleet, seconds: float) -> None:
    """Let the cluster fire for a while, failing fast if a node dies."""
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        fleet.check_alive()
        time.sleep(0.5)


def unfinished(fleet: Fleet, start: datetime, end: datetime) -> list[tuple[str, datetime]]:
    """The slots of the window without a succeeded run row at attempt 1."""
    rows = fleet.sql(
        "SELECT job_name, scheduled_for FROM runs WHERE status = 'succeeded' AND attempt = 1"
        " AND scheduled_for BETWEEN %s AND %s",
        (start, end),
    )
    done = {(row["job_name"], row["scheduled_for"]) for row in rows}
    slots = every_slots(1, start, end)
    return [
        (f"job-{i:02d}", s) for i in range(JOBS) for s in slots if (f"job-{i:02d}", s) not in done
    ]


def test_a_rolling_upgrade_from_the_previous_release_loses_and_doubles_no_slot(
    fleet: Fleet, settings: ClusterSettings, tmp_path: Path
) -> None:
    old = extract(tmp_path / "previous")
    assert previous_pulse(old, settings, "init", "--shards", str(SHARDS)).returncode == 0
    jobs = [
        {"name": f"job-{i:02d}", "schedule": "@every 1s", "catch_up": "backfill",
         "handler": "cluster.chaos.witness:record"}
        for i in range(JOBS)
    ]  # fmt: skip
    (tmp_path / "jobs.yaml").write_text(json.dumps({"jobs": jobs}))
    applied = previous_pulse(old, settings, "jobs", "apply", str(tmp_path / "jobs.yaml"))
    assert applied.returncode == 0, applied.stderr
    for node in OLD:
        fleet.start(node, "a", wait=False, tree=old)
    held_by(fleet, *OLD)
    start = db_now(fleet) + timedelta(seconds=1)
    pause(fleet, 2)

    init = spawn(settings, "init").result()
    assert init.returncode == 0, init.stderr
    print(f"\n{init.stdout.strip()}")
    if "(applied: none)" not in init.stdout:
        refused = previous_pulse(old, settings, "node", "--node-id", "old-late")
        assert refused.returncode == 2, refused.stderr
        assert "newer than this node knows" in refused.stderr, refused.stderr

    for node in NEW:
        fleet.start(node, "a", wait=False)
    held_by(fleet, *OLD, *NEW)
    # An every-node job would run on one node of the previous release: refused until the
    # last one has left (docs/design/each-node.md#rolling-upgrades).
    every_node = ("jobs", "add", "sweep", "--schedule", "@daily", "--each-node", "--handler")
    every_node += ("cluster.chaos.witness:record",)
    refused_job = spawn(settings, *every_node).result()
    assert refused_job.returncode == 2, refused_job.stderr
    assert "node old-1, old-2, old-3 runs a release that" in refused_job.stderr
    for i, node in enumerate(OLD):
        assert fleet.stop(node) == 0, fleet.logs()
        held_by(fleet, *OLD[i + 1 :], *NEW)
    end = db_now(fleet)
    made = spawn(settings, *every_node).result()
    assert made.returncode == 0, made.stderr

    until(lambda: not unfinished(fleet, start, end), "every slot of the window", 60)
    executions = fleet.executions()
    assert doubles(executions) == [], fleet.logs()
    window = [e for e in executions if start <= e.slot <= end]
    assert len(window) == JOBS * len(every_slots(1, start, end))
    lags = sorted(e.lag_s for e in window)
    print(
        f"{len(window)} slots of {PREVIOUS} and this tree's nodes over "
        f"{(end - start).total_seconds():.0f} s: lag median {statistics.median(lags):.3f} s, "
        f"max {lags[-1]:.3f} s"
    )
