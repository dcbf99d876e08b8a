"""A chain of three jobs end to end: real nodes, one SIGKILLed between an upstream's success
and its downstream's start. Each downstream slot runs once, only after its upstream's slot
succeeded, and none is lost (docs/design/gates.md)."""

from __future__ import annotations

import signal
from datetime import datetime

import pytest

from cluster.chaos.witness import Execution
from cluster.jobs.spec import JobSpec
from tests.helpers.fleet import Fleet
from tests.helpers.nodes import init_cluster
from tests.helpers.waiting import until

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(120)]

WITNESS = "cluster.chaos.witness:record"


def _succeeded(fleet: Fleet, job: str) -> dict[datetime, datetime]:
    """The slots of ``job`` that succeeded, with when their completion was written."""
    rows = fleet.sql(
        "SELECT scheduled_for, finished_at FROM runs WHERE job_name = %s AND status = 'succeeded'",
        (job,),
    )
    return {r["scheduled_for"]: r["finished_at"] for r in rows}


def _records(fleet: Fleet, slots: list[datetime]) -> str:
    """What the runs table holds for ``slots`` of a, b and c (a failed check's message)."""
    rows = fleet.sql(
        "SELECT job_name, scheduled_for, status, attempt, node_id, last_error, history"
        " FROM runs WHERE scheduled_for = ANY(%s) ORDER BY scheduled_for, job_name",
        (slots,),
    )
    jobs = fleet.sql("SELECT name, status, slot_at, next_run_at, gate_wait FROM jobs")
    return f"slots {slots} did not run through the chain: runs {rows}; jobs {jobs}"


def _starts(fleet: Fleet, job: str) -> list[Execution]:
    return [e for e in fleet.executions() if e.job == job]


def test_a_chain_survives_a_kill_between_an_upstream_success_and_its_downstream(
    fleet: Fleet,
) -> None:
    every = {"catch_up": "backfill"}
    # b runs only in zone z2, where no node lives yet: when the node of z1 is killed, the
    # slots a has released for b have not started, by construction.
    init_cluster(
        fleet.settings,
        JobSpec.build("a", "@every 1s", WITNESS, zones="z1", **every),  # type: ignore[arg-type]
        JobSpec.build("b", "@every 1s", WITNESS, zones="z2", after="a", **every),  # type: ignore[arg-type]
        JobSpec.build("c", "@every 1s", WITNESS, zones="z1", after="b", **every),  # type: ignore[arg-type]
    )
    # One first slot for the three: every slot a succeeds is one of b's and c's too
    # (init_cluster plans them from one clock reading, tests/integration/test_cluster_setup.py).
    assert len({r["slot_at"] for r in fleet.sql("SELECT slot_at FROM jobs")}) == 1
    fleet.start("n1", "z1")
    until(lambda: len(_succeeded(fleet, "a")) >= 3, "a to succeed a few slots", 30)
    fleet.node("n1").signal(signal.SIGKILL)
    released = sorted(_succeeded(fleet, "a"))
    held = fleet.sql("SELECT gate_wait, next_run_at, slot_at FROM jobs WHERE name = 'b'")[0]
    assert not _starts(fleet, "b") and not held["gate_wait"], held
    assert held["next_run_at"] >= held["slot_at"] and held["slot_at"] in released  # due

    fleet.start("n2", "z2")
    fleet.start("n3", "z1")
    until(lambda: released[-1] in _succeeded(fleet, "c"), "c to run a's last slot before", 60)
    fleet.stop_all()

    a_ok, b_ok = _succeeded(fleet, "a"), _succeeded(fleet, "b")
    for downstream, upstream in (("b", a_ok), ("c", b_ok)):
        starts = _starts(fleet, downstream)
        slots = [e.slot for e in starts]
        assert len(slots) == len(set(slots)), f"{downstream} ran a slot twice"
        for e in starts:
            assert e.slot in upstream, f"{downstream} ran {e.slot} before its upstream succeeded"
            assert e.at > upstream[e.slot].timestamp(), f"{downstream} started too early"
    # None lost: every slot a succeeded before the kill ran through b and c.
    lost = sorted((set(released) - set(b_ok)) | (set(released) - set(_succeeded(fleet, "c"))))
    assert not lost, _records(fleet, lost)


def test_a_chained_three_job_chain_survives_a_kill_between_success_and_start(
    fleet: Fleet,
) -> None:
    """The same with ``@after:`` jobs (docs/design/chains.md): b and c have no clock; each
    success of their upstream makes one of their slots, none lost, none doubled."""
    init_cluster(
        fleet.settings,
        JobSpec.build("a", "@every 1s", WITNESS, zones="z1", catch_up="backfill"),
        JobSpec.build("b", "@after:a", WITNESS, zones="z2"),
        JobSpec.build("c", "@after:b", WITNESS, zones="z1"),
    )
    fleet.start("n1", "z1")
    until(lambda: len(_succeeded(fleet, "a")) >= 3, "a to succeed a few slots", 30)
    fleet.node("n1").signal(signal.SIGKILL)
    released = sorted(_succeeded(fleet, "a"))
    assert not _starts(fleet, "b"), "b's zone has no node yet"
    queued = fleet.sql("SELECT slot FROM chain_slots ORDER BY slot")
    held = fleet.sql("SELECT next_run_at, slot_at FROM jobs WHERE name = 'b'")[0]
    # Every success before the kill is b's, once: taken as its slot, or queued.
    assert sorted({held["slot_at"], *(r["slot"] for r in queued)}) == released, (held, queued)

    fleet.start("n2", "z2")
    fleet.start("n3", "z1")
    until(lambda: released[-1] in _succeeded(fleet, "c"), "c to run a's last slot before", 60)
    fleet.stop_all()

    a_ok, b_ok = _succeeded(fleet, "a"), _succeeded(fleet, "b")
    for downstream, upstream in (("b", a_ok), ("c", b_ok)):
        starts = _starts(fleet, downstream)
        slots = [e.slot for e in starts]
        assert len(slots) == len(set(slots)), f"{downstream} ran a slot twice"
        for e in starts:
            assert e.slot in upstream, f"{downstream} ran {e.slot}, not a success upstream"
            assert e.at > upstream[e.slot].timestamp(), f"{downstream} started too early"
    assert set(released) <= set(b_ok) and set(released) <= set(_succeeded(fleet, "c"))


def test_gated_jobs_added_before_their_nodes_start_run_and_so_does_their_chain(
    fleet: Fleet,
) -> None:
    """a and b (after a), both every 2 s, and c chained to b, added a few seconds before two
    nodes start: a's first slots are coalesced by catch-up once, and b's slot that waited
    for one of them is recorded skipped with that reason instead of waiting for ever."""
    init_cluster(
        fleet.settings,
        JobSpec.build("a", "@every 2s", WITNESS),
        JobSpec.build("b", "@every 2s", WITNESS, after="a"),
        JobSpec.build("c", "@after:b", WITNESS),
    )
    (first,) = fleet.sql("SELECT slot_at FROM jobs WHERE name = 'b'")
    ahead = "SELECT now() > %s + interval '5 seconds' AS past"
    until(lambda: fleet.sql(ahead, (first["slot_at"],))[0]["past"], "a few missed slots", 10)
    fleet.start("n1", "z1")
    fleet.start("n2", "z1")
    until(lambda: _succeeded(fleet, "c"), "c to run a slot of b", 30)
    fleet.stop_all()

    (held,) = fleet.sql(
        "SELECT status, last_error FROM runs WHERE job_name = 'b' AND scheduled_for = %s",
        (first["slot_at"],),
    )
    assert held["status"] == "skipped", held
    assert held["last_error"].startswith("upstream a's slot "), held
    assert " was skipped: missed by " in held["last_error"], held
    b_ok, c_ok = _succeeded(fleet, "b"), _succeeded(fleet, "c")
    assert set(c_ok) <= set(b_ok) <= set(_succeeded(fleet, "a"))
