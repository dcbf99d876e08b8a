"""Every-node jobs end to end (docs/design/each-node.md): real nodes n1, n2 and n3, one
each-node job whose runs last a moment. Each slot runs once on every live node; n2 is
SIGKILLed in the middle of its run: that slot closes "2/3, node n2 missed (died ...)" and
no other node runs n2's part; n4, started later, is not counted in the slots fanned out
before it joined, and runs the slots after once each.
"""

from __future__ import annotations

import signal
from collections import Counter, defaultdict
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from cluster.jobs.spec import JobSpec
from tests.helpers.cli import spawn
from tests.helpers.fleet import Fleet
from tests.helpers.nodes import init_cluster
from tests.helpers.waiting import until

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(150)]

WITNESS = "cluster.chaos.witness:record"


def _closed(fleet: Fleet) -> dict[datetime, dict[str, Any]]:
    """The slots fanned out whose roll-up closed: their run rows by slot. A slot that catch-up
    skipped (its claim came late on a busy machine) was fanned out to nobody (``_skipped``)."""
    rows = fleet.sql(
        "SELECT scheduled_for, status, last_error, output FROM runs"
        " WHERE job_name = 'sweep' AND status <> 'running' AND output -> 'coverage' IS NOT NULL"
    )
    return {r["scheduled_for"]: r for r in rows}


def _skipped(fleet: Fleet) -> set[datetime]:
    rows = fleet.sql(
        "SELECT scheduled_for FROM runs WHERE job_name = 'sweep' AND status = 'skipped'"
    )
    return {r["scheduled_for"] for r in rows}


def _ran(fleet: Fleet) -> dict[datetime, list[str]]:
    """The nodes whose handler started, per slot (the witness file)."""
    by_slot: dict[datetime, list[str]] = defaultdict(list)
    for e in fleet.executions():
        if e.job == "sweep":
            by_slot[e.slot].append(e.node)
    return by_slot


def _members(row: dict[str, Any]) -> list[str]:
    return list(row["output"]["coverage"]["members"])


def _ran_by(row: dict[str, Any]) -> set[str]:
    ended = row["output"]["coverage"]["ended"]
    return {m for m, e in ended.items() if e["status"] != "missed"}


def test_every_node_runs_each_slot_once_and_a_killed_node_is_named(fleet: Fleet) -> None:
    job = JobSpec.build("sweep", "@every 2s", WITNESS, each_node=True, payload={"sleep_s": 1.0})
    init_cluster(fleet.settings, job)
    for node_id in ("n1", "n2", "n3"):
        fleet.start(node_id, "a")

    def full_slot() -> datetime | None:
        return next(
            (
                s
                for s, r in _closed(fleet).items()
                if _members(r) == ["n1", "n2", "n3"] and r["last_error"] == "3/3"
            ),
            None,
        )

    first = until(full_slot, "a slot run on n1, n2 and n3", 40)
    assert _closed(fleet)[first]["status"] == "succeeded"
    assert _closed(fleet)[first]["output"]["coverage"]["summary"] == "3/3"

    def n2_mid_run() -> datetime | None:
        fleet.check_alive()
        started = {s for s, nodes in _ran(fleet).items() if "n2" in nodes}
        rows = fleet.sql("SELECT slot FROM node_runs WHERE member = 'n2' AND status = 'running'")
        return next((r["slot"] for r in rows if r["slot"] in started), None)

    killed = until(n2_mid_run, "n2 in the middle of a run", 30)
    fleet.node("n2").signal(signal.SIGKILL)
    row = until(lambda: _closed(fleet).get(killed), "the killed slot to close", 40)
    assert row["status"] == "succeeded"
    assert row["last_error"].startswith("2/3, node n2 missed (died "), row["last_error"]
    assert sorted(_ran(fleet)[killed]) == ["n1", "n2", "n3"]  # nobody ran n2's part again

    # The ring without n2: slots fanned out to n1 and n3 alone.
    after_kill = until(
        lambda: next((s for s, r in _closed(fleet).items() if _members(r) == ["n1", "n3"]), None),
        "a slot of n1 and n3",
        40,
    )
    assert _closed(fleet)[after_kill]["last_error"] == "2/2"

    fleet.start("n4", "a")
    joined = until(
        lambda: next(
            (
                s
                for s, r in _closed(fleet).items()
                if _members(r) == ["n1", "n3", "n4"] and r["last_error"] == "3/3"
            ),
            None,
        ),
        "a slot run on n1, n3 and n4",
        40,
    )

    closed, ran = _closed(fleet), _ran(fleet)
    for slot, r in closed.items():
        nodes = Counter(ran.get(slot, []))
        # Each node ran a slot at most once, and only a member of its roll-up did.
        assert all(n == 1 for n in nodes.values()), (slot, nodes)
        assert set(nodes) <= set(_members(r)), (slot, nodes, r)
        # The roll-up's runs are those the nodes started; n2's killed run, missed, aside.
        assert _ran_by(r) == set(nodes) - ({"n2"} if slot == killed else set()), (slot, r)
        if slot < after_kill:
            assert "n4" not in _members(r)  # joined after: not counted
    assert min(s for s, r in closed.items() if "n4" in _members(r)) <= joined
    assert not _skipped(fleet) & set(ran), "a skipped slot ran nowhere"


def test_a_node_drained_mid_run_is_named_and_its_run_not_moved(fleet: Fleet) -> None:
    fleet.drain_timeout = "1s"  # shorter than a run: the drain ends with the run going
    job = JobSpec.build("sweep", "@every 3s", WITNESS, each_node=True, payload={"sleep_s": 2.5})
    init_cluster(fleet.settings, job)
    for node_id in ("n1", "n2"):
        fleet.start(node_id, "a")

    def n2_mid_run() -> datetime | None:
        fleet.check_alive()
        started = {s for s, nodes in _ran(fleet).items() if "n2" in nodes}
        # A slot fanned out to both (so its coverage names n2), n2's run of it going.
        rows = fleet.sql(
            "SELECT n.slot FROM node_runs n JOIN node_slots s USING (job_id, slot)"
            " WHERE n.member = 'n2' AND n.status = 'running' AND s.members = '{n1,n2}'"
        )
        return next((r["slot"] for r in rows if r["slot"] in started), None)

    drained = until(n2_mid_run, "n2 in the middle of a run", 40)
    assert fleet.stop("n2") == 0
    row = until(lambda: _closed(fleet).get(drained), "the drained slot to close", 40)
    assert row["last_error"].startswith("1/2, node n2 missed (drained "), row["last_error"]
    assert sorted(_ran(fleet)[drained]) == ["n1", "n2"]  # nobody ran n2's part again


def _lines(path: Path) -> list[tuple[str, str]]:
    """(node, slot) per whole line of a handler's marker file (one being written: not yet)."""
    if not path.exists():
        return []
    parts = (line.split() for line in path.read_text().splitlines())
    return [(p[0], p[1]) for p in parts if len(p) == 2]


def test_a_cancel_stops_every_members_run_and_starts_none_of_the_queued(
    fleet: Fleet, tmp_path: Path
) -> None:
    """Two triggered slots: the first runs on n1, n2 and n3 (a long handler), the second
    waits behind it on each member. `pulse runs cancel --all` stops the three runs and
    starts none of the three queued; both slots close cancelled, naming every member."""
    handler = "tests.e2e.steer_handlers:sleeps_noting_stop"
    job = JobSpec.build("sweep", "@daily", handler, each_node=True, payload={"dir": str(tmp_path)})
    init_cluster(fleet.settings, job)
    for node_id in ("n1", "n2", "n3"):
        fleet.start(node_id, "a")
    until(lambda: len(fleet.shards_per_node()) == 3 or None, "three nodes holding shards", 40)
    started, stopped = tmp_path / "sweep.started", tmp_path / "sweep.stopped"

    def open_slots() -> list[dict[str, Any]]:
        fleet.check_alive()
        return fleet.sql("SELECT slot, members FROM node_slots ORDER BY slot")

    assert spawn(fleet.settings, "jobs", "trigger", "sweep").result().returncode == 0
    until(lambda: len(_lines(started)) == 3 or None, "the first slot running on 3 nodes", 40)
    ((first, members),) = [(r["slot"], r["members"]) for r in open_slots()]
    assert members == ["n1", "n2", "n3"]
    assert spawn(fleet.settings, "jobs", "trigger", "sweep").result().returncode == 0
    second = until(
        lambda: next((r["slot"] for r in open_slots() if r["slot"] != first), None),
        "the second slot fanned out",
        40,
    )
    queued = fleet.sql(
        "SELECT member FROM node_runs WHERE slot = %s AND status = 'queued'", (second,)
    )
    assert sorted(r["member"] for r in queued) == ["n1", "n2", "n3"]  # behind the first

    done = spawn(fleet.settings, "runs", "cancel", "sweep", "--all", "--by", "tester").result()
    assert done.returncode == 0, done.stderr
    assert done.stdout.count("not started") == 3, done.stdout

    closed = until(
        lambda: (lambda rows: rows if first in rows and second in rows else None)(_closed(fleet)),
        "both slots to close",
        40,
    )
    everyone = "3/3, node n1 cancelled, node n2 cancelled, node n3 cancelled"
    for slot in (first, second):
        assert closed[slot]["status"] == "cancelled"
        assert closed[slot]["last_error"] == everyone, closed[slot]
        ended = closed[slot]["output"]["coverage"]["ended"]
        assert {e["why"] for e in ended.values()} == {"cancelled by tester"}
    # Every member's handler was stopped; none started the second slot, none ran it again.
    until(lambda: len(_lines(stopped)) == 3 or None, "the three handlers to stop", 40)
    assert sorted(_lines(stopped)) == sorted(_lines(started))
    assert sorted(n for n, _ in _lines(started)) == ["n1", "n2", "n3"]
    assert {s for _, s in _lines(started)} == {first.isoformat()}
    assert fleet.sql("SELECT * FROM node_runs") == []
