"""`pulse status` against real node processes: healthy, a shard unheld, nodes killed.

Each case checks the text screen, the ``--json`` document and the exit code (0 healthy,
1 when a shard is unheld or no node is alive).
"""

from __future__ import annotations

import asyncio
import json
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import node.cli  # noqa: F401  (registers `pulse node` beside `pulse status`)
from cluster.cli.status import _ranges
from cluster.health.status import Status, UnheldTracker, collect
from cluster.jobs.spec import JobSpec
from cluster.settings import ClusterSettings
from ring import Ring
from tests.helpers.cli import invoke, spawn
from tests.helpers.nodes import Nodes, ghost_member, init_cluster
from tests.helpers.waiting import until

SHARDS = 16
pytestmark = pytest.mark.timeout(120)


@pytest.fixture
def nodes(settings: ClusterSettings, tmp_path: Path) -> Iterator[Nodes]:
    init_cluster(settings, JobSpec.build("tick", "@every 1s", "shell:true"), shards=SHARDS)
    started = Nodes(settings, tmp_path)
    try:
        yield started
    except AssertionError:
        for node in started.started:
            print(f"--- {node.name}", *node.lines()[-30:], sep="\n")
        print("--- last status", LAST)
        raise
    finally:
        started.stop_all()


def snapshot(settings: ClusterSettings) -> Status:
    return asyncio.run(collect(settings))


def status_cli(settings: ClusterSettings, *args: str) -> tuple[int, str]:
    flags = (
        "--database-url", settings.database_url, "--redis-url", settings.redis_url,
        "--schema", settings.schema, "--cluster", settings.cluster,
    )  # fmt: skip
    result = invoke({}, *flags, "status", *args)  # flags, not the environment
    return result.exit_code, result.output


def status_json(settings: ClusterSettings) -> tuple[int, dict[str, Any]]:
    code, out = status_cli(settings, "--json")
    return code, json.loads(out)


LAST: list[Status] = []


def settled(settings: ClusterSettings, alive: set[str]) -> Status | None:
    """The status once exactly ``alive`` are members and hold every shard as the ring says."""
    st = snapshot(settings)
    LAST[:] = [st]
    members = {m.node_id for m in st.members}
    if members == alive and st.healthy and not st.misplaced and not st.held_by_non_members:
        return st
    return None


def test_healthy_cluster_text_and_json(settings: ClusterSettings, nodes: Nodes) -> None:
    nodes.start("a-1", "a")
    nodes.start("b-1", "b")
    until(lambda: settled(settings, {"a-1", "b-1"}), "two nodes sharing all shards", 30)
    until(lambda: snapshot(settings).lag_samples > 0, "a fired slot", 30)

    code, data = status_json(settings)
    assert code == 0
    assert data["healthy"] is True and data["problems"] == []
    assert data["fenced_writes"] == 0
    assert data["alive"] == 2
    assert [(m["zone"], m["node_id"]) for m in data["members"]] == [("a", "a-1"), ("b", "b-1")]
    assert sum(m["shards_held"] for m in data["members"]) == SHARDS
    assert all(m["has_session"] and m["concurrency"] > 0 for m in data["members"])
    assert all(m["heartbeat_age_s"] < 5 for m in data["members"])
    assert data["unheld"] == [] and data["misplaced"] == []
    assert data["lag_samples"] > 0 and data["lag_p50_s"] is not None
    assert data["outcomes_1h"]["succeeded"] + data["outcomes_1h"]["running"] > 0
    assert set(data["outcomes_1h"]) >= {"succeeded", "failed", "lost", "skipped"}

    code, text = status_cli(settings)
    assert code == 0
    assert "HEALTHY" in text and "UNHEALTHY" not in text
    assert "zone a" in text and "zone b" in text
    assert "a-1" in text and "b-1" in text
    assert f"shards: {SHARDS}/{SHARDS} held; unheld: none" in text
    assert "fire lag (last minute" in text and "runs (last hour)" in text


def _ghost_id(node_id: str) -> tuple[str, frozenset[int]]:
    """A ghost member name that the ring gives at least one shard next to ``node_id``."""
    for i in range(1, 100):
        ghost = f"ghost-{i}"
        owned = Ring([node_id, ghost]).owned(ghost, SHARDS)
        if owned:
            return ghost, owned
    raise AssertionError("no ghost name owns a shard")


def test_unheld_shards_make_status_unhealthy(settings: ClusterSettings, nodes: Nodes) -> None:
    nodes.start("a-1", "a")
    until(lambda: settled(settings, {"a-1"}), "one node holding every shard", 30)
    ghost, owned = _ghost_id("a-1")

    with ghost_member(settings, ghost):
        # The ghost is a live member with a session, so a-1 hands it its ring share, but
        # the ghost never locks anything: those shards stay held by nobody.
        st = until(
            lambda: (s := snapshot(settings)).unheld == sorted(owned) and s,
            "the ghost's shards to be unheld",
            30,
        )
        assert not st.healthy
        code, data = status_json(settings)
        assert code == 1
        assert data["healthy"] is False
        assert data["unheld"] == sorted(owned)
        assert data["unheld_for_s"] is None  # a single look cannot tell for how long
        assert any("held by no node" in p for p in data["problems"])

        code, text = status_cli(settings)
        assert code == 1
        assert "UNHEALTHY" in text
        assert f"unheld: {len(owned)} ({_ranges(sorted(owned))}) now" in text

        tracker = UnheldTracker()
        first = asyncio.run(collect(settings, tracker=tracker))
        second = until(
            lambda: (s := asyncio.run(collect(settings, tracker=tracker))).unheld_for_s and s,
            "the watch view to age the unheld shards",
            10,
        )
        assert first.unheld_for_s is None
        assert second.unheld_for_s is not None and second.unheld_for_s > 0

    until(lambda: settled(settings, {"a-1"}), "a-1 to take the ghost's shards back", 30)
    assert status_cli(settings)[0] == 0


def test_killed_nodes(settings: ClusterSettings, nodes: Nodes) -> None:
    procs = [nodes.start(f"{zone}-1", zone) for zone in "abc"]
    until(lambda: settled(settings, {"a-1", "b-1", "c-1"}), "three settled nodes", 30)

    procs[2].signal(signal.SIGKILL)
    procs[2].proc.wait(10)
    st = until(lambda: settled(settings, {"a-1", "b-1"}), "failover to a-1 and b-1", 30)
    assert sum(m.shards_held for m in st.members) == SHARDS
    code, data = status_json(settings)
    assert code == 0 and data["alive"] == 2
    assert "c-1" not in {m["node_id"] for m in data["members"]}

    for proc in procs[:2]:
        proc.signal(signal.SIGKILL)
        proc.proc.wait(10)
    until(lambda: not snapshot(settings).members, "the dead nodes' heartbeats to expire", 30)
    code, data = status_json(settings)
    assert code == 1
    assert data["alive"] == 0 and data["members"] == []
    assert "no node is alive" in data["problems"]
    assert len(data["unheld"]) == SHARDS
    code, text = status_cli(settings)
    assert code == 1
    assert "UNHEALTHY: no node is alive" in text


def test_watch_json_streams_one_document_per_refresh(
    settings: ClusterSettings, nodes: Nodes
) -> None:
    nodes.start("a-1", "a")
    until(lambda: settled(settings, {"a-1"}), "one settled node", 30)
    # Ctrl-C reaches the command as in a terminal: a background job of a shell ignores
    # SIGINT, and a command it starts inherits that (a handler is reset at exec, SIG_IGN is
    # not), so a suite started with `&` would send a SIGINT nobody hears.
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        proc = spawn(settings, "status", "--watch", "--json", "--interval", "0.2s")
    finally:
        signal.signal(signal.SIGINT, previous)
    try:
        assert proc.stdout is not None
        docs = [json.loads(proc.stdout.readline()) for _ in range(2)]
    finally:
        proc.send_signal(signal.SIGINT)
        proc.result(10)
    assert all(d["healthy"] and d["alive"] == 1 for d in docs)


def test_ranges() -> None:
    assert _ranges([]) == ""
    assert _ranges([3]) == "3"
    assert _ranges([1, 2, 3, 7, 9, 10]) == "1-3, 7, 9-10"


def test_tracker_remembers_since_when() -> None:
    tracker = UnheldTracker()
    assert tracker.observe([1, 2], now=10.0) is None
    assert tracker.observe([2, 3], now=12.5) == 2.5
    assert tracker.observe([3], now=13.0) == 0.5
    assert tracker.observe([], now=14.0) is None
    assert tracker.observe([3], now=15.0) is None
