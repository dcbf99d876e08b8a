"""Overlap ``allow`` end to end, on two real nodes: slots of one job run side by side, never
more than ``--max-concurrent`` at once across the cluster, each slot once; a slot beyond the
limit waits for a free place and then runs. A SIGKILLed node's flights are taken back and
run again elsewhere, and still no slot succeeds twice.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import signal
from collections import Counter
from pathlib import Path

import pytest

from cluster.jobs.spec import JobSpec
from cluster.settings import ClusterSettings
from cluster.store.jobstore.store import JobStore
from tests.helpers.fleet import Fleet
from tests.helpers.nodes import init_cluster
from tests.helpers.waiting import until

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(150)]
TIMING = ("--lease", "3s", "--renew-interval", "1s", "--session-timeout", "4s")
LIMIT = 3


def intervals(path: Path) -> list[tuple[str, int, float, float]]:
    """(slot, attempt, start, end) of each attempt that ran to its end."""
    starts: dict[tuple[str, int], float] = {}
    done = []
    for line in path.read_text().splitlines():
        rec = json.loads(line)
        key = (rec["slot"], rec["attempt"])
        if rec["end"]:
            done.append((*key, starts[key], rec["at"]))
        else:
            starts[key] = rec["at"]
    return done


def pause(settings: ClusterSettings, name: str) -> None:
    async def go() -> None:
        async with JobStore.open(settings) as store:
            await store.pause(name)

    asyncio.run(go())


def most_at_once(spans: list[tuple[str, int, float, float]]) -> int:
    edges = sorted([(s, 1) for *_, s, _ in spans] + [(e, -1) for *_, e in spans])
    now = peak = 0
    for _, step in edges:
        now += step
        peak = max(peak, now)
    return peak


def test_allow_runs_slots_side_by_side_up_to_the_limit_each_once(
    settings: ClusterSettings, fleet: Fleet, tmp_path: Path
) -> None:
    spec = JobSpec.build(
        "fan",
        "@every 1s",
        "tests.e2e.steer_handlers:overlaps",
        payload={"dir": str(tmp_path), "hold_s": 2.5},
        overlap="allow",
        max_concurrent=LIMIT,
        retries=2,
        catch_up="backfill",
    )
    init_cluster(settings, spec)
    fleet.start("n1", "a", *TIMING)
    fleet.start("n2", "b", *TIMING)
    log = tmp_path / "fan.jsonl"

    killed: list[str] = []

    def finished(count: int) -> bool:
        for node in fleet.started:
            assert node.running or node.name in killed, node.tail(20)
        return log.exists() and len(intervals(log)) >= count

    until(lambda: finished(6), "six slots to finish", 60)
    victim = fleet.sql("SELECT locked_by FROM flights WHERE status = 'running' LIMIT 1")
    if victim:  # kill a node with flights in flight; the survivor takes them back
        killed.append(str(victim[0]["locked_by"]))
        fleet.node(killed[0]).signal(signal.SIGKILL)
    before = len(intervals(log))
    until(lambda: finished(before + 6), "six more slots after the kill", 60)
    pause(settings, "fan")
    until(lambda: not fleet.sql("SELECT 1 FROM flights"), "the flights in flight to end", 60)
    fleet.stop_all()

    spans = intervals(log)
    peak = most_at_once(spans)
    assert peak <= LIMIT, f"{peak} attempts at once"
    assert peak >= 2, "slots never ran side by side"
    runs = fleet.sql("SELECT scheduled_for, status, attempt FROM runs ORDER BY scheduled_for")
    succeeded = [r["scheduled_for"].isoformat() for r in runs if r["status"] == "succeeded"]
    # Every slot ran to success once, in order, none missing between the first and last.
    assert len(succeeded) == len(set(succeeded)) >= 12
    finished_ok = Counter(slot for slot, attempt, *_ in spans)
    assert set(succeeded) <= set(finished_ok)
    slots = sorted(r["scheduled_for"] for r in runs)
    assert all((b - a).total_seconds() == 1.0 for a, b in itertools.pairwise(slots))
