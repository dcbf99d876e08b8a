"""A real node whose sync handler hangs every time: its runs time out, the threads they
are stuck in stay capped (with a warning), and SIGTERM still stops the node at once
(handler threads never hold up the exit)."""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from cluster.jobs.spec import JobSpec
from cluster.settings import ClusterSettings
from cluster.store.jobstore.store import JobStore
from tests.helpers.nodes import Nodes, init_cluster
from tests.helpers.waiting import until

CONCURRENCY = 2


def hang(ctx: object) -> None:
    """The handler: never returns in time."""
    time.sleep(600)


@pytest.fixture
def nodes(settings: ClusterSettings, tmp_path: Path) -> Iterator[Nodes]:
    spec = JobSpec.build("hang", "@every 1s", f"{__name__}:hang", timeout="1s")
    init_cluster(settings, spec, shards=16)
    started = Nodes(settings, tmp_path)
    try:
        yield started
    finally:
        started.stop_all()


def timed_out(settings: ClusterSettings) -> int:
    async def go() -> int:
        async with JobStore.open(settings) as store:
            return sum(r.status == "timed_out" for r in await store.runs(job="hang"))

    return asyncio.run(go())


def threads(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/task"))


@pytest.mark.timeout(120)
def test_a_handler_that_always_hangs_is_contained(settings: ClusterSettings, nodes: Nodes) -> None:
    node = nodes.start("n1", "a", "--concurrency", str(CONCURRENCY))
    # Enough timed-out runs to reach the cap: then runs wait for a thread (and time out).

    def warned() -> bool:
        return any("handler threads are stuck" in line for line in node.lines())

    until(warned, "the stuck-threads warning", 60)
    until(lambda: timed_out(settings) >= 4 * CONCURRENCY, "more runs to time out", 60)
    # The main thread, 2 x concurrency handler threads all stuck, and at most a few of
    # asyncio's own (name resolution): not one more per run that timed out.
    assert 2 * CONCURRENCY + 1 <= threads(node.proc.pid) <= 2 * CONCURRENCY + 4
    assert node.stop(timeout_s=20) == 0
    assert any("node stopped" in line for line in node.lines())
