"""``pulse node --sync-jobs``: several real nodes started together create the jobs of a
registry once, under the advisory lock; a node whose registry differs warns and leaves the
applied definition alone; a module that does not import stops the node with one line."""

from __future__ import annotations

import asyncio
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import pytest

from cluster.local.processes import node_argv, pulse_env
from cluster.settings import ClusterSettings
from cluster.store.jobstore.store import JobStore
from tests.helpers import REPO
from tests.helpers.nodes import Nodes
from tests.helpers.waiting import until

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(120)]

T = TypeVar("T")
SYNC = ("--sync-jobs", "tests.registries.billing")


async def _init(settings: ClusterSettings) -> None:
    async with JobStore.open(settings) as store:
        await store.init(shards=16)


async def _jobs(settings: ClusterSettings) -> dict[str, str]:
    async with JobStore.open(settings) as store:
        return {f"{j.tenant}/{j.name}": j.schedule for j in await store.jobs()}


def _synced(nodes: Nodes, node_id: str) -> str | None:
    return next((ln for ln in nodes.node(node_id).lines() if "jobs synced:" in ln), None)


def _probe(fn: Callable[..., T], *args: Any) -> Callable[[], T]:
    return lambda: fn(*args)


def test_nodes_starting_together_sync_once(settings: ClusterSettings, tmp_path: Path) -> None:
    asyncio.run(_init(settings))
    nodes = Nodes(settings, tmp_path)
    try:
        names = ["s1", "s2", "s3"]
        for name in names:
            nodes.start(name, "a", *SYNC, wait=False)
        for name in names:
            until(_probe(nodes._joined, nodes.node(name)), f"{name} to join", 60)
        lines = [until(_probe(_synced, nodes, name), "a sync line", 30) for name in names]
        assert sum("2 created, 0 unchanged" in ln for ln in lines) == 1, lines
        assert sum("0 created, 2 unchanged, 0 differ" in ln for ln in lines) == 2, lines
        expected = {"acme/billing_rollup": "0 * * * *", "default/beat": "@every 1s"}
        assert asyncio.run(_jobs(settings)) == expected

        nodes.start("s4", "a", "--sync-jobs", "tests.registries.changed")
        warning = until(lambda: _synced(nodes, "s4"), "s4 sync line", 30)
        assert "0 created, 0 unchanged, 1 differ" in warning
        log = "\n".join(nodes.node("s4").lines())
        assert "job beat differs from its applied definition; left as applied" in log
        assert asyncio.run(_jobs(settings)) == expected
        assert set(nodes.stop_all().values()) == {0}
    finally:
        nodes.close()


def test_a_module_that_does_not_import_stops_the_node(settings: ClusterSettings) -> None:
    argv = node_argv("bad", "a", "--sync-jobs", "tests.registries.empty")
    done = subprocess.run(
        argv, env=pulse_env(settings), cwd=REPO, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 2
    assert done.stderr.splitlines() == [
        "pulse: invalid module: tests.registries.empty holds no pulsecron Registry"
    ]
