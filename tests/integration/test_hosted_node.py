"""``pulsecron.Node``: a node on the caller's event loop, with the jobs of a registry
synced at start, its status, its drain on exit, and the application's signals untouched."""

from __future__ import annotations

import asyncio
import gc
import signal
from pathlib import Path

import pytest

import pulsecron
from cluster.errors import ConfigError
from cluster.members import MemberRegistry
from cluster.settings import ClusterSettings, NodeSettings
from cluster.store.jobstore.store import JobStore
from tests.helpers.waiting import until
from tests.registries import billing

pytestmark = pytest.mark.timeout(60)


async def test_a_hosted_node_runs_synced_jobs_and_drains_on_exit(
    store: JobStore, settings: ClusterSettings, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    beats = tmp_path / "beats.txt"
    monkeypatch.setenv("PULSE_TEST_BEAT_FILE", str(beats))
    handlers = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGINT)}
    node = pulsecron.Node(
        NodeSettings(node_id="hosted-1", drain_timeout_s=5),
        cluster=settings,
        sync_jobs=[billing.jobs, billing.ops],
    )
    assert node.status().running is False
    frozen = gc.get_freeze_count()
    async with node:
        assert {sig: signal.getsignal(sig) for sig in handlers} == handlers
        assert sorted(j.name for j in await store.jobs()) == ["beat", "billing_rollup"]
        offered = {(r.tenant, r.handler, r.registered_by) for r in await store.handlers.all()}
        assert offered == {
            ("acme", "tests.registries.billing:billing_rollup", "hosted-1"),
            ("default", "tests.registries.billing:beat", "hosted-1"),
        }, "the handlers of synced registries are offered to the API"
        await until(lambda: len(node.status().held_shards) == 16, "all 16 shards held", 20)
        await until(
            lambda: beats.exists() and beats.read_text().count("hosted-1") >= 2, "beats", 20
        )
        # The application's heap is its own: only `pulse node` freezes its start-up objects
        # (the count may fall: frozen objects are still freed when unreferenced).
        assert gc.get_freeze_count() <= frozen
        status = node.status()
        assert (status.node_id, status.running, status.members) == (
            "hosted-1",
            True,
            ("hosted-1",),
        )
    assert node.status().running is False
    runs = await store.runs(job="beat")
    assert runs and {r.status for r in runs} <= {"succeeded"}, [r.status for r in runs]
    registry = MemberRegistry(settings, timeout_s=2)
    try:
        assert "hosted-1" not in [m.node_id for m in await registry.live(5.0)]
    finally:
        await registry.close()


async def test_an_application_that_gives_up_starting_stops_the_node(
    settings: ClusterSettings,
) -> None:
    # No schema: like `pulse node`, the node waits for the database; the caller's timeout
    # cancels the start and the node is stopped, not left running behind its back.
    node = pulsecron.Node(NodeSettings(node_id="hosted-3"), cluster=settings)
    with pytest.raises(TimeoutError):
        async with asyncio.timeout(1.0):
            await node.start()
    assert node.status().running is False
    assert node._task is not None and node._task.done()  # stopped, not left behind


async def test_a_hosted_node_that_refuses_to_start_raises(
    store: JobStore, settings: ClusterSettings
) -> None:
    # Like `pulse node --shards 8` against a 16-shard database: refused at start.
    node = pulsecron.Node(NodeSettings(node_id="hosted-2", shards=8), cluster=settings)
    with pytest.raises(ConfigError, match="hosted-2 stopped at start"):
        async with node:
            pytest.fail("the node started")
    assert node.status().running is False
