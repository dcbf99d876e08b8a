"""Retention end to end: real nodes keep a busy runs table bounded while they claim.

300 jobs ``@every 1s`` with ``--keep-for 15s`` on two nodes pruning every 2 s: once the
first runs pass 15 s, every job keeps at most 2 x 15 rows (and the table at most that plus
one prune batch), no row is older than 2 x 15 s, and that stays so after one node is
SIGKILLed and the other takes its shards. The rows counted are the slots' ages in the
database, so a slow machine (late runs) does not move the bound; no assertion is about
speed.
"""

from __future__ import annotations

import asyncio
import signal
import time
import urllib.request

import pytest

from cluster.jobs.spec import JobSpec
from cluster.local.processes import free_port
from cluster.settings import ClusterSettings
from cluster.store.housekeeping.pruning import BATCH
from cluster.store.jobstore.store import JobStore
from tests.helpers.fleet import Fleet
from tests.helpers.waiting import until

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.timeout(180)]

JOBS = 300
KEEP_S = 15
SHARDS = 32
PRUNE = ("--prune-interval", "2s")


def plant(settings: ClusterSettings) -> None:
    specs = [
        JobSpec.build(
            f"r{i:03d}", "@every 1s", "cluster.chaos.witness:record", keep_for=f"{KEEP_S}s"
        )
        for i in range(JOBS)
    ]

    async def go() -> None:
        async with JobStore.open(settings) as store:
            await store.init(shards=SHARDS)
            await store.definitions.apply(specs)

    asyncio.run(go())


def table_state(fleet: Fleet) -> tuple[int, int, float]:
    """(rows of the fullest job, rows in all, age in seconds of the oldest slot)."""
    (row,) = fleet.sql(
        "SELECT coalesce(max(n), 0) AS most, coalesce(sum(n), 0)::int AS total,"
        " (SELECT coalesce(extract(epoch FROM now() - min(scheduled_for)), 0)::float8"
        "  FROM runs) AS oldest_s"
        " FROM (SELECT count(*) AS n FROM runs GROUP BY job_id) AS per_job"
    )
    return int(row["most"]), int(row["total"]), float(row["oldest_s"])


def alive(fleet: Fleet, *names: str) -> None:
    for name in names:
        node = fleet.node(name)
        assert node.running, f"{name} exited with {node.proc.returncode}:\n{node.tail(20)}"


def watch(fleet: Fleet, seconds: float, samples: list[tuple[int, int, float]], *names: str) -> None:
    """Check the bounds about every second for ``seconds``, failing fast if a node dies."""
    until = time.monotonic() + seconds
    while time.monotonic() < until:
        alive(fleet, *names)
        most, total, oldest_s = sample = table_state(fleet)
        samples.append(sample)
        assert most <= 2 * KEEP_S, (sample, fleet.logs())
        assert total <= JOBS * 2 * KEEP_S + BATCH, sample
        assert oldest_s <= 2 * KEEP_S, sample
        time.sleep(min(1.0, max(0.0, until - time.monotonic())))


def scrape(port: int) -> dict[str, float]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
        text = response.read().decode()
    found = {}
    for line in text.splitlines():
        if line.startswith("pulse_runs_") and "{" not in line:
            name, _, value = line.partition(" ")
            found[name] = float(value)
    return found


def test_nodes_keep_the_runs_table_bounded(fleet: Fleet, settings: ClusterSettings) -> None:
    started = time.monotonic()
    plant(settings)
    port = free_port()
    fleet.start("a", "a", *PRUNE, "--metrics-port", str(port))
    fleet.start("b", "b", *PRUNE)
    until(lambda: set(fleet.shards_per_node()) == {"a", "b"}, "both nodes to hold shards", 30)
    # Until the first slots pass keep_for there is nothing to prune: wait for the first prune.
    until(
        lambda: alive(fleet, "a", "b") or scrape(port).get("pulse_runs_pruned_total", 0) > 0,
        "node a to prune runs",
        90,
    )
    samples: list[tuple[int, int, float]] = []
    watch(fleet, 15, samples, "a", "b")

    fleet.node("b").signal(signal.SIGKILL)
    assert fleet.node("b").wait(10) is not None
    until(
        lambda: alive(fleet, "a") or fleet.shards_per_node() == {"a": SHARDS},
        "a to hold every shard",
        30,
    )
    # Longer than keep_for: rows of b's shards would pass 2 x keep_for unless a prunes them now.
    watch(fleet, KEEP_S + 5, samples, "a")

    metrics = scrape(port)
    ran = len(fleet.executions())
    total = samples[-1][1]
    assert metrics["pulse_runs_pruned_total"] > 0
    assert metrics["pulse_runs_table_bytes"] > 0
    # Far more slots ran than rows are left: pruning, not a quiet cluster, kept it small.
    assert ran > total + JOBS * KEEP_S // 2, (ran, total)
    print(
        f"\n{ran} runs; rows per job at most {max(s[0] for s in samples)}, in all at most "
        f"{max(s[1] for s in samples)}, oldest slot at most {max(s[2] for s in samples):.0f} s "
        f"({len(samples)} samples); node a pruned {metrics['pulse_runs_pruned_total']:.0f}; "
        f"wall time {time.monotonic() - started:.0f} s"
    )
