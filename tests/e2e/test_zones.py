"""Zone-pinned jobs end to end: real nodes in zones a, b and c.

A job pinned to zone a runs only on zone a's node, one pinned to a,b only on a or b, and
an unpinned one anywhere. Zone a is killed (SIGKILL of its only node): its job is unplaced
(`pulse status` exits 1), its slot is marked late, the a,b job moves to zone b; when a
node of zone a returns, the missed slots are caught up there. No slot runs twice.
"""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
import sys
from datetime import datetime, timedelta
from pathlib import Path

import pytest

from cluster.errors import Conflict
from cluster.health.status import collect
from cluster.jobs.spec import JobSpec
from cluster.local.processes import pulse_env
from cluster.store.jobstore.specs import ApplyResult
from tests.helpers import REPO
from tests.helpers.examples import documented, matches
from tests.helpers.fleet import Fleet, doubles
from tests.helpers.nodes import init_cluster
from tests.helpers.waiting import until

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(120)]

WITNESS = "cluster.chaos.witness:record"


def _slots(fleet: Fleet, job: str) -> dict[datetime, str]:
    return {e.slot: e.node for e in fleet.executions() if e.job == job}


def _status(fleet: Fleet) -> subprocess.CompletedProcess[str]:
    env = pulse_env(fleet.settings)
    argv = [str(Path(sys.executable).parent / "pulse"), "status"]
    return subprocess.run(argv, env=env, cwd=REPO, capture_output=True, text=True, check=False)


def test_pinned_jobs_run_only_in_their_zones_through_a_zone_kill(fleet: Fleet) -> None:
    every = {"catch_up": "backfill", "late_after": "2s"}
    init_cluster(
        fleet.settings,
        # Busy most of the time: the kill most likely lands mid-run, whose slot is then
        # recovered by a node of another zone (the zone is dark) and reported late.
        JobSpec.build("in-a", "@every 1s", WITNESS, zones="a", payload={"sleep_s": 0.8}, **every),  # type: ignore[arg-type]
        JobSpec.build("in-ab", "@every 1s", WITNESS, zones="a,b", **every),  # type: ignore[arg-type]
        JobSpec.build("anywhere", "@every 1s", WITNESS, **every),  # type: ignore[arg-type]
    )
    for node_id, zone in (("a1", "a"), ("b1", "b"), ("c1", "c")):
        fleet.start(node_id, zone)
    until(lambda: len(_slots(fleet, "in-a")) >= 3, "in-a to run", 30)
    until(lambda: len(_slots(fleet, "in-ab")) >= 3, "in-ab to run", 30)

    fleet.node("a1").signal(signal.SIGKILL)  # zone a goes dark
    killed_at = asyncio.run(_db_now(fleet))
    st = until(
        lambda: (s := asyncio.run(collect(fleet.settings))) and _unplaced(s) and s,
        "in-a to be shown unplaced",
        30,
    )
    assert not st.healthy and [p.name for p in st.pinned if not p.placed] == ["in-a"]
    shown = _status(fleet)
    assert shown.returncode == 1, shown.stderr
    assert "unplaced (no live node in their zones): default/in-a" in shown.stdout, shown.stdout
    # The zones' part of it, as docs/zones.md shows it (figures and hosts aside).
    zones = ["...", *documented("docs/zones.md#status"), "..."]
    assert matches(zones, shown.stdout.splitlines(), numbers=True), shown.stdout
    until(
        lambda: any(s > killed_at and n == "b1" for s, n in _slots(fleet, "in-ab").items()),
        "in-ab to move to zone b",
        30,
    )
    until(
        lambda: fleet.sql("SELECT late_slot FROM jobs WHERE name = 'in-a'")[0]["late_slot"],
        "in-a's slot to be marked late",
        30,
    )
    dark_until = asyncio.run(_db_now(fleet))

    fleet.start("a2", "a")  # zone a returns
    until(lambda: any(s > dark_until for s in _slots(fleet, "in-a")), "in-a to run again", 30)
    runs = _slots(fleet, "in-a")
    missed = [s for s in runs if killed_at < s <= dark_until]
    assert missed and {runs[s] for s in missed} == {"a2"}, "the dark slots are caught up in a"

    assert all(fleet.node(n).running for n in ("b1", "c1", "a2")), fleet.logs()
    assert set(_slots(fleet, "in-a").values()) <= {"a1", "a2"}
    assert set(_slots(fleet, "in-ab").values()) <= {"a1", "a2", "b1"}
    assert not doubles(e for e in fleet.executions() if e.attempt == 1 and e.node != "a1")
    # Every run row names zone a, but a slot lost with a1 on its last attempt: that one
    # is recorded failed by the node that recovered it (whose zone the row shows).
    rows = fleet.sql("SELECT zone, last_error FROM runs WHERE job_name = 'in-a'")
    ran = [r for r in rows if not (r["last_error"] or "").startswith("lost with its node")]
    assert ran and {r["zone"] for r in ran} == {"a"}


def _unplaced(st: object) -> bool:
    return any(not p.placed for p in getattr(st, "pinned", []))


async def _db_now(fleet: Fleet) -> datetime:
    from cluster.store.jobstore.store import JobStore

    async with JobStore.open(fleet.settings) as store:
        return await store.db_now()


def test_an_each_zone_job_runs_once_per_zone_per_slot(fleet: Fleet) -> None:
    ping = JobSpec.build("ping", "@every 1s", WITNESS, each_zone=True)
    init_cluster(fleet.settings, ping)
    for node_id, zone in (("a1", "a"), ("b1", "b"), ("b2", "b")):
        fleet.start(node_id, zone)

    def both_zones() -> bool:
        done = {e.job for e in fleet.executions()}
        return {"ping@a", "ping@b"} <= done and len(_slots(fleet, "ping@b")) >= 3

    until(both_zones, "ping to run in zones a and b", 30)
    assert asyncio.run(_apply_pruning(fleet, ping)).removed == [], "children go with the parent"
    fleet.node("a1").signal(signal.SIGKILL)  # zone a goes dark: its child goes
    until(
        lambda: not fleet.sql("SELECT 1 FROM jobs WHERE name = 'ping@a'"),
        "ping@a to be removed",
        40,
    )
    executions = fleet.executions()
    assert "ping" not in {e.job for e in executions}, "the parent never runs itself"
    assert {e.node for e in executions if e.job == "ping@a"} == {"a1"}
    assert {e.node for e in executions if e.job == "ping@b"} <= {"b1", "b2"}
    assert not doubles(e for e in executions if e.job.startswith("ping@")), "once per zone"
    assert set(_slots(fleet, "ping@a")) & set(_slots(fleet, "ping@b")), "slots run in both"
    runs = fleet.sql("SELECT job_name, zone FROM runs WHERE job_name LIKE 'ping@%%'")
    assert runs and all(r["job_name"] == f"ping@{r['zone']}" for r in runs)
    assert fleet.node("b1").running and fleet.node("b2").running, fleet.logs()


def test_an_each_zone_jobs_children_follow_its_new_timing_and_pause_with_their_records(
    fleet: Fleet,
) -> None:
    """Nodes in zones a and b run an each-zone job every second. A new timing and a
    ``pause --until`` of the job act on both children in the operator's transaction, and
    ``pulse audit`` over the whole run finds every slot of each child ran or recorded, by its
    parent's definitions since the child was made (before, the keeper moved the children a
    pass later without records, and the audit judged each child by its definition as it
    stands, finding the slots before the new timing missing). Made an ordinary job, the
    job's children go in the apply's transaction and no slot runs both in a child and in
    the job (before, the apply failed); made an each-zone job again, the job stops and the
    keepers make its children anew."""
    ping = JobSpec.build("ping", "@every 1s", WITNESS, each_zone=True)
    init_cluster(fleet.settings, ping)
    (start,) = (r["now"] for r in fleet.sql("SELECT now()"))
    fleet.start("a1", "a")
    fleet.start("b1", "b")

    def ran_since(since: datetime, count: int) -> bool:
        fleet.check_alive()
        return all(
            len([s for s in _slots(fleet, child) if s > since]) >= count
            for child in ("ping@a", "ping@b")
        )

    until(lambda: ran_since(start, 3), "ping to run in zones a and b", 30)
    changed = asyncio.run(
        _change(fleet, JobSpec.build("ping", "@every 2s", WITNESS, each_zone=True))
    )
    until(lambda: ran_since(changed, 3), "both children to run @every 2s", 30)
    assert all(
        s.second % 2 == 0 for c in ("ping@a", "ping@b") for s in _slots(fleet, c) if s > changed
    )
    until_s = asyncio.run(_pause_until(fleet, seconds=4))
    until(lambda: ran_since(until_s, 2), "both children to run after the pause", 30)
    assert not [
        (c, s)
        for c in ("ping@a", "ping@b")
        for s in _slots(fleet, c)
        if until_s - timedelta(seconds=4) < s < until_s
    ], "no slot inside the pause ran"
    assert {"ran", "paused"} <= set(_audited(fleet, start, until_s).values())
    plain = asyncio.run(_change(fleet, JobSpec.build("ping", "@every 1s", WITNESS)))
    assert not fleet.sql("SELECT name FROM jobs WHERE parent_id IS NOT NULL"), "children gone"
    until(lambda: len([s for s in _slots(fleet, "ping") if s > plain]) >= 3, "ping to run", 30)
    children = ("ping@a", "ping@b")
    assert not [(c, s) for c in children for s in _slots(fleet, c) if s > plain]
    each = asyncio.run(_change(fleet, JobSpec.build("ping", "@every 1s", WITNESS, each_zone=True)))
    until(lambda: ran_since(each, 2), "ping's children to run again", 30)
    assert not [s for s in _slots(fleet, "ping") if s > each], "the each-zone job never runs"
    (end,) = (r["now"] for r in fleet.sql("SELECT now()"))
    assert {job for job, _ in _audited(fleet, start, end)} == {"ping", *children}


def _audited(fleet: Fleet, start: datetime, end: datetime) -> dict[tuple[str, str], str]:
    """``pulse audit --json`` of the window, which must exit 0 (no slot missing or
    overwritten): the verdict of each slot of ping and its children, by (job, slot)."""
    env = pulse_env(fleet.settings)
    pulse = str(Path(sys.executable).parent / "pulse")
    argv = [pulse, "audit", "--from", start.isoformat(), "--to", end.isoformat(), "--json"]
    audit = subprocess.run(argv, env=env, cwd=REPO, capture_output=True, text=True, check=False)
    lines = [json.loads(line) for line in audit.stdout.splitlines()]
    slots = [line for line in lines if line["type"] == "slot" and line["job"].startswith("ping")]
    assert audit.returncode == 0, [
        line for line in slots if line["verdict"] in ("missing", "overwritten")
    ]
    return {(line["job"], line["slot"]): line["verdict"] for line in slots}


async def _change(fleet: Fleet, spec: JobSpec) -> datetime:
    """Apply ``spec``; the database's clock when it committed."""
    from cluster.store.jobstore.store import JobStore

    async with JobStore.open(fleet.settings) as store:
        await store.definitions.apply([spec])
        return await store.db_now()


async def _pause_until(fleet: Fleet, seconds: int) -> datetime:
    """``pulse jobs pause ping --until`` ``seconds`` on; that time. Refused while a child's
    run is in progress, as for any job: asked again, as its message says."""
    from cluster.store.jobstore.store import JobStore

    async with JobStore.open(fleet.settings) as store:
        for _ in range(50):
            until = await store.db_now() + timedelta(seconds=seconds)
            try:
                await store.holds.pause_until("ping", "default", until)
            except Conflict:
                await asyncio.sleep(0.05)  # a child's run of a few ms ends
                continue
            return until
    raise AssertionError("a child of ping was running at every try")


async def _apply_pruning(fleet: Fleet, spec: JobSpec) -> ApplyResult:
    from cluster.store.jobstore.store import JobStore

    async with JobStore.open(fleet.settings) as store:
        return await store.definitions.apply([spec], prune=True)
