"""Issue 28, end to end: nodes on a multi-host URL ride through a pg_auto_failover
switchover and a failover, without a restart, without losing or doubling a slot.

A real formation (``cluster.chaos.servers.pgha``: a monitor, a primary and its synchronous
standby) and two real node processes on ``postgresql://n1,n2/...?target_session_attrs=
read-write``. Jobs fire every second with catch-up ``backfill``, so every slot must run:
through ``pg_autoctl perform switchover`` (the primary steps down cleanly) and through the
primary's host being killed (the standby is promoted). The witness file, kept outside
Postgres, must show each slot once; the runs table must show each slot succeeded at its
first attempt; both nodes must have kept running. Timings are printed, not asserted.

pg_auto_failover can lose acknowledged commits: a standby it finds unhealthy leaves the
write quorum, and a switchover asked for at that moment promotes it all the same. Slots
whose first run started in such a span (``PgFormation.lossy_spans``, from the monitor's
events) may run again, and are left out of the checks; any other double fails.

It costs about 30 s (10 s of it the formation's start); it is skipped, saying why, only
when pg_auto_failover is missing and cannot be installed here.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from cluster.chaos.servers.pgha import PgFormation
from cluster.settings import ClusterSettings
from tests.helpers.failover import db_now, every_slot_ran_once, ran_since, started, ticking_fleet
from tests.helpers.fleet import Fleet
from tests.helpers.waiting import until

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.timeout(240)]

JOBS = [f"tick-{i:02d}" for i in range(12)]


@pytest.fixture(scope="module")
def formation(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PgFormation]:
    with started(PgFormation, tmp_path_factory.mktemp("pgha"), "pg_auto_failover") as pg:
        yield pg


@pytest.fixture
def ha_fleet(formation: PgFormation, settings: ClusterSettings, tmp_path: Path) -> Iterator[Fleet]:
    with ticking_fleet(replace(settings, database_url=formation.url), tmp_path, JOBS) as nodes:
        yield nodes


def resumed(fleet: Fleet, after: float) -> bool:
    return ran_since(fleet, JOBS, after)


def longest_gaps(fleet: Fleet) -> dict[str, float]:
    """Per job, the longest time between two consecutive handler starts."""
    starts: dict[str, list[float]] = {}
    for e in fleet.executions():
        starts.setdefault(e.job, []).append(e.at)
    return {
        job: max(b - a for a, b in zip(sorted(at), sorted(at)[1:], strict=False))
        for job, at in starts.items()
    }


def test_nodes_ride_through_a_switchover_and_a_failover(
    formation: PgFormation, ha_fleet: Fleet
) -> None:
    fleet = ha_fleet
    fleet.start("pa", "a", wait=False)
    fleet.start("pb", "b", wait=False)
    until(lambda: len(set(fleet.holders().values())) == 2, "both nodes hold shards", 30)
    start = db_now(fleet)
    first = time.time()
    until(lambda: resumed(fleet, first), "every job to run", 20)

    switched = formation.switchover()
    began, since = time.monotonic(), time.time()
    until(lambda: resumed(fleet, since), "claims after the switchover", 30)
    after_switch = time.monotonic() - began

    old, new, promotion_s = formation.fail_primary()
    began, promoted = time.monotonic(), time.time()
    until(lambda: resumed(fleet, promoted), "claims after the failover", 30)
    after_fail = time.monotonic() - began

    def lost() -> list[tuple[float, float]]:
        return [(s.began, s.ended) for s in formation.lossy_spans(since=first)]

    end, expected, executions = every_slot_ran_once(fleet, JOBS, start, lost)
    runs = [
        r
        for r in fleet.sql(
            "SELECT job_name, scheduled_for, attempt, status FROM runs "
            "WHERE scheduled_for BETWEEN %s AND %s",
            (start, end),
        )
        if (r["job_name"], r["scheduled_for"]) in expected
    ]
    assert {(r["job_name"], r["scheduled_for"]) for r in runs} == expected
    assert {(r["status"], r["attempt"]) for r in runs} == {("succeeded", 1)}
    gaps = longest_gaps(fleet)
    print(
        f"switchover {switched:.1f}s, claims back {after_switch:.1f}s later; "
        f"failover {old}->{new}: promoted in {promotion_s:.1f}s, claims back "
        f"{after_fail:.1f}s later; longest gap of any job {max(gaps.values()):.1f}s; "
        f"{len(expected)} slots, {len(executions)} executions"
    )
