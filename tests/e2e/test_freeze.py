"""A death told from a blip, with real node processes (docs/design/recovery.md).

- A SIGKILLed node loses its lock session and its Redis connection together: a survivor
  says it died (rather than waiting out the grace a blip gets) and its shards move.
- A SIGSTOPped node keeps both connections open, but its heartbeat goes stale and its
  session idles: a survivor ends that session, long before the node's own (here two
  minutes) session timeout would, and its shards move. Woken, the node finds its session
  gone, claims nothing on it, and takes its share again on a new one.

Nothing here is timed: the deadlines only say that something happens well before the
session timeout could have done it.
"""

from __future__ import annotations

import signal

import pytest

from cluster.jobs.spec import JobSpec
from cluster.settings import ClusterSettings
from tests.helpers.fleet import Fleet
from tests.helpers.nodes import init_cluster
from tests.helpers.waiting import until

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(150)]
SHARDS = 16
NODES = (("n1", "a"), ("n2", "b"), ("n3", "c"))
SESSION = ("--session-timeout", "120s")


def _started(fleet: Fleet, settings: ClusterSettings) -> None:
    specs = [
        JobSpec.build(f"tick-{i}", "@every 1s", "cluster.chaos.witness:record") for i in range(24)
    ]
    init_cluster(settings, *specs, shards=SHARDS)
    for node_id, zone in NODES:
        fleet.start(node_id, zone, *SESSION)
    until(lambda: set(fleet.holders().values()) == {"n1", "n2", "n3"}, "every node to hold shards")


def _taken_from(fleet: Fleet, node_id: str) -> bool:
    holders = fleet.holders()
    return len(holders) == SHARDS and node_id not in holders.values()


def _survivors_log(fleet: Fleet) -> str:
    return "".join((fleet.workdir / f"{n}.log").read_text() for n in ("n1", "n3"))


def test_a_killed_node_is_told_dead_and_its_shards_move(
    settings: ClusterSettings, fleet: Fleet
) -> None:
    _started(fleet, settings)
    fleet.node("n2").signal(signal.SIGKILL)
    fleet.node("n2").wait(10)
    until(lambda: _taken_from(fleet, "n2"), "the survivors to hold every shard", 30)
    assert "member n2 died" in _survivors_log(fleet), fleet.logs()
    assert fleet.node("n1").running and fleet.node("n3").running, fleet.logs()


def test_a_frozen_node_loses_its_session_before_the_timeout_and_comes_back(
    settings: ClusterSettings, fleet: Fleet
) -> None:
    _started(fleet, settings)
    frozen = fleet.node("n2")
    frozen.signal(signal.SIGSTOP)
    try:
        until(lambda: _taken_from(fleet, "n2"), "the survivors to hold every shard", 60)
        log = _survivors_log(fleet)
        assert "ended the lock session of n2" in log, fleet.logs()
    finally:
        frozen.signal(signal.SIGCONT)
    until(lambda: "n2" in fleet.holders().values(), "the woken node to take its share again", 60)
    woken = (fleet.workdir / "n2.log").read_text()
    assert "lock session lost" in woken or "dropping" in woken, woken[-3000:]
    fleet.check_alive()
