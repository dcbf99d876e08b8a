"""`pulse up --nodes 3 --example`, driven as a newcomer would: start it, watch the example
jobs fire on three nodes, kill one node (the launcher reports and restarts it), press
Ctrl-C, and expect a clean exit with no node process left behind."""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from cluster.health.status import collect
from cluster.jobs.files import load_specs
from cluster.local.processes import Command, pulse_env
from cluster.settings import ClusterSettings
from cluster.store.jobstore.store import JobStore
from ring import Ring
from tests.helpers import REPO
from tests.helpers.waiting import until

NODE_IDS = ("a-1", "b-1", "c-1")
STARTED = re.compile(r"started (\S+) in zone \S+ \(pid (\d+)\)")
pytestmark = [pytest.mark.e2e, pytest.mark.timeout(180)]


async def _place_examples(settings: ClusterSettings) -> None:
    """Apply the example jobs so that each of the three nodes owns a fast one.

    Job ids are random, so where the jobs land on the ring is luck; re-create them until
    every node has one, so the test checks the launcher and not the dice.
    """
    specs = load_specs(str(REPO / "examples" / "jobs.yaml"))
    ring = Ring(NODE_IDS)
    async with JobStore.open(settings) as store:
        result = await store.init()
        for _ in range(200):
            await store.definitions.apply(specs)
            fast = [j for j in await store.jobs() if re.fullmatch(r"@every [235]s", j.schedule)]
            owners = {ring.owner(job.shard) for job in fast}
            if owners == set(NODE_IDS):
                return
            for job in await store.jobs():
                await store.remove(job.name, job.tenant)
        raise AssertionError(f"could not place fast jobs on all nodes of {result.shards} shards")


def _succeeded_on(settings: ClusterSettings) -> set[str]:
    with psycopg.connect(settings.database_url, autocommit=True) as conn:
        rows = conn.execute(
            f'SELECT DISTINCT node_id FROM "{settings.schema}".runs WHERE status = %s',
            ("succeeded",),
        ).fetchall()
    return {row[0] for row in rows}


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


@pytest.fixture
def launched(
    settings: ClusterSettings, tmp_path: Path
) -> Iterator[tuple[subprocess.Popen[bytes], Path]]:
    asyncio.run(_place_examples(settings))
    log = tmp_path / "up.log"
    # In a process group of its own, like a terminal job.
    argv = [sys.executable, "-m", "node", "up", "--nodes", "3", "--example", "--no-web"]
    proc = Command(argv, pulse_env(settings), REPO).start("pulse up", log).proc
    try:
        yield proc, log
    finally:
        pids = [int(pid) for _, pid in STARTED.findall(log.read_text())]
        for pid in [proc.pid, *pids]:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        proc.wait(10)


def test_up_fires_examples_on_three_nodes_and_stops_cleanly(
    settings: ClusterSettings, launched: tuple[subprocess.Popen[bytes], Path]
) -> None:
    proc, log = launched

    def output() -> str:
        if proc.poll() is not None:
            raise AssertionError(f"pulse up exited with {proc.returncode}:\n{log.read_text()}")
        return log.read_text()

    until(lambda: _succeeded_on(settings) == set(NODE_IDS), "runs on a-1, b-1, c-1", 60)
    text = output()
    assert "example jobs: 0 created" in text  # the placed jobs were already up to date
    for node_id in NODE_IDS:
        assert re.search(rf"^{node_id} +\| .*examples\.gateway", text, flags=re.MULTILINE)

    # A node that dies is reported and restarted.
    victim = dict(STARTED.findall(text))["c-1"]
    os.kill(int(victim), signal.SIGKILL)
    until(lambda: "c-1 died unexpectedly (signal SIGKILL)" in output(), "the report", 30)
    until(lambda: len(STARTED.findall(output())) == 4, "c-1 to be restarted", 30)
    restarted = int(STARTED.findall(output())[-1][1])
    until(
        lambda: any(
            m.node_id == "c-1" and m.pid == restarted and m.has_session
            for m in asyncio.run(collect(settings)).members
        ),
        "the restarted c-1 to rejoin",
        30,
    )

    # Ctrl-C in the terminal: SIGINT to the foreground process group.
    os.killpg(proc.pid, signal.SIGINT)
    assert proc.wait(60) == 0, log.read_text()
    text = log.read_text()
    assert "stopping 3 nodes" in text and "all nodes stopped" in text
    for node_id in NODE_IDS:
        assert re.search(rf"^{node_id} +\| .*node stopped", text, flags=re.MULTILINE)
    pids = [int(pid) for _, pid in STARTED.findall(text)]
    assert len(pids) == 4
    assert not [pid for pid in pids if _alive(pid)], "a node outlived pulse up"
