"""Issue 28, end to end: nodes on a ``redis+sentinel://`` URL ride through a Redis failover.

A real Sentinel setup (``cluster.chaos.servers.sentinel``: a primary, its replica, one sentinel)
and two real node processes. The primary is killed; the sentinel promotes the replica; the
nodes' next heartbeats reach it without a restart. Redis never decides who owns a shard,
so nothing fires twice, and no slot is lost (catch-up ``backfill``). The test measures how
long after the kill the cluster is settled again (both members heartbeating on the new
primary, ``pulse status`` healthy through the Sentinel URL, every shard held by its owner)
and prints it with the promotion time; the bound (heartbeat TTL + 5 s) is checked by
``pulse chaos``, since tests never assert on speed.

It costs about 6-10 s; it is skipped, saying why, only when ``redis-sentinel`` is missing and
cannot be installed here.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from cluster.chaos.servers.sentinel import SentinelSet
from cluster.health.status import collect
from cluster.settings import ClusterSettings
from tests.helpers.failover import db_now, every_slot_ran_once, ran_since, started, ticking_fleet
from tests.helpers.fleet import Fleet
from tests.helpers.waiting import until

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(180)]

JOBS = [f"beat-{i:02d}" for i in range(12)]
FRESH_S = 2.0  # a heartbeat at most this old (twice the interval) is a live one


@pytest.fixture(scope="module")
def sentinels(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SentinelSet]:
    with started(SentinelSet, tmp_path_factory.mktemp("sentinel"), "redis-sentinel") as found:
        yield found


@pytest.fixture
def sentinel_fleet(
    sentinels: SentinelSet, settings: ClusterSettings, tmp_path: Path
) -> Iterator[Fleet]:
    with ticking_fleet(replace(settings, redis_url=sentinels.url), tmp_path, JOBS) as nodes:
        yield nodes


def settled(fleet: Fleet, nodes: set[str]) -> bool:
    """Every node heartbeats fresh through the Sentinel URL; status is healthy."""
    fleet.check_alive()
    status = asyncio.run(collect(fleet.settings))
    fresh = {m.node_id for m in status.members if m.heartbeat_age_s <= FRESH_S}
    return status.members_error is None and fresh == nodes and status.healthy


def resumed(fleet: Fleet, since: float) -> bool:
    return ran_since(fleet, JOBS, since)


def test_nodes_ride_through_a_sentinel_failover(
    sentinels: SentinelSet, sentinel_fleet: Fleet
) -> None:
    fleet = sentinel_fleet
    fleet.start("sa", "a", wait=False)
    fleet.start("sb", "b", wait=False)
    until(lambda: settled(fleet, {"sa", "sb"}), "both nodes settled", 30)
    start = db_now(fleet)
    first = time.time()
    until(lambda: resumed(fleet, first), "every job to run", 20)

    killed_at = time.monotonic()
    old, new, promotion_s = sentinels.fail_primary()
    until(lambda: settled(fleet, {"sa", "sb"}), "the cluster settled on the new primary", 30)
    settle_s = time.monotonic() - killed_at
    since = time.time()
    until(lambda: resumed(fleet, since), "claims after the failover", 20)

    end, expected, executions = every_slot_ran_once(fleet, JOBS, start)
    runs = fleet.sql(
        "SELECT status, attempt FROM runs WHERE scheduled_for BETWEEN %s AND %s", (start, end)
    )
    assert len(runs) == len(expected)
    assert {(r["status"], r["attempt"]) for r in runs} == {("succeeded", 1)}
    print(
        f"redis failover {old}->{new}: promoted in {promotion_s:.1f}s, cluster settled "
        f"{settle_s:.1f}s after the kill; {len(expected)} slots, {len(executions)} executions"
    )
