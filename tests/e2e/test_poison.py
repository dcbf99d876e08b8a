"""A poison job end to end: its handler ends the process of whatever node runs it
(``os._exit``), under a supervisor that restarts every node that dies (the loop below, as
systemd or Kubernetes would). Each of its slots kills at most retries + 1 nodes, is then
recorded failed ("lost with its node") with a ``failed`` alert, and the job moves on; every
other job keeps firing and loses no slot.
"""

from __future__ import annotations

import asyncio
from collections import Counter, defaultdict
from collections.abc import Callable
from datetime import datetime

import pytest

from cluster.alerts.rules import AlertRule
from cluster.jobs.spec import JobSpec
from cluster.settings import ClusterSettings
from cluster.store.housekeeping.alerts import AlertStore
from tests.helpers.fleet import Fleet, every_slots
from tests.helpers.nodes import init_cluster
from tests.helpers.receiver import allow_local, receiver
from tests.helpers.waiting import until

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(180)]
WITNESS = "cluster.chaos.witness:record"
CRASH = 70  # the poison handler's exit code
RETRIES = 1
INNOCENTS = 12
NODES = (("n1", "a"), ("n2", "b"), ("n3", "c"))
POISON_SLOTS = 2


def supervise(fleet: Fleet, deaths: list[tuple[str, int]], done: Callable[[], bool]) -> None:
    """Restart every node that dies (same id), until ``done()`` or a 90 s deadline."""
    zones = dict(NODES)

    def restart_the_dead() -> bool:
        for node_id in zones:
            node = fleet.node(node_id)
            if not node.running:
                code = node.proc.returncode
                assert code == CRASH, f"{node_id} exited with {code}:\n{node.tail(30)}"
                deaths.append((node_id, code))
                fleet.start(node_id, zones[node_id], wait=False)
        return done()

    until(restart_the_dead, "the run to end, dead nodes restarted", 90)


def test_a_poison_job_kills_at_most_retries_plus_one_nodes_per_slot_and_others_keep_firing(
    fleet: Fleet, settings: ClusterSettings
) -> None:
    innocents = [
        JobSpec.build(f"tick-{i:02d}", "@every 1s", WITNESS, retries=3, catch_up="backfill")
        for i in range(INNOCENTS)
    ]
    poison = JobSpec.build(
        "poison", "@every 10s", WITNESS, payload={"crash": CRASH}, retries=RETRIES
    )
    init_cluster(settings, *innocents, poison)
    allow_local(settings)
    with receiver() as r:

        async def rule() -> None:
            async with AlertStore.open(settings) as alerts:
                await alerts.add_rule(AlertRule.build("ops", r.url, events="failed", job="poison"))

        asyncio.run(rule())
        for node_id, zone in NODES:
            try:
                fleet.start(node_id, zone)
            except AssertionError:
                # The poison slot may fall due while a node joins: it dies as any node that
                # runs it does, and the supervisor below restarts it.
                if fleet.node(node_id).proc.returncode != CRASH:
                    raise
        start: datetime = fleet.sql("SELECT now() AS t")[0]["t"]

        def poison_failed() -> list[dict[str, object]]:
            return fleet.sql(
                "SELECT * FROM runs WHERE job_name = 'poison' AND status = 'failed'"
                " ORDER BY scheduled_for"
            )

        deaths: list[tuple[str, int]] = []
        supervise(fleet, deaths, lambda: len(poison_failed()) >= POISON_SLOTS)
        end: datetime = fleet.sql("SELECT now() AS t")[0]["t"]
        failed_slots = {row["scheduled_for"] for row in poison_failed()}
        until(
            lambda: (
                {r.json()["slot"] for r in r.received()} >= {s.isoformat() for s in failed_slots}
            ),
            "a failed alert for every poison slot",
            30,
        )
        # Let the others catch up on what they owed over the window, still supervised.
        supervise(fleet, deaths, lambda: not missing(fleet, start, end))

    rows = poison_failed()
    for row in rows:
        assert str(row["last_error"]).startswith(
            f"lost with its node on attempt {RETRIES + 1} of {RETRIES + 1}"
        ), row
    # Each execution of the poison job killed its node, and none of its slots more than
    # retries + 1 of them.
    poisoned = [e for e in fleet.executions() if e.job == "poison"]
    per_slot = Counter(e.slot for e in poisoned)
    assert per_slot and max(per_slot.values()) <= RETRIES + 1, per_slot
    for slot in failed_slots:  # type: ignore[union-attr]
        assert per_slot[slot] == RETRIES + 1, (slot, per_slot)
    assert len(deaths) == len(poisoned), (deaths, poisoned)
    assert {code for _, code in deaths} == {CRASH}
    # Every other job: every slot of the window ran and none failed.
    assert missing(fleet, start, end) == []
    others_failed = fleet.sql(
        "SELECT job_name, scheduled_for, last_error FROM runs"
        " WHERE job_name <> 'poison' AND status NOT IN ('succeeded', 'lost')"
    )
    assert others_failed == []


def missing(fleet: Fleet, start: datetime, end: datetime) -> list[tuple[str, datetime]]:
    """Slots of the innocent jobs in [start, end] that no execution witnessed."""
    ran: dict[str, set[datetime]] = defaultdict(set)
    for e in fleet.executions():
        ran[e.job].add(e.slot)
    return [
        (f"tick-{i:02d}", slot)
        for i in range(INNOCENTS)
        for slot in every_slots(1, start, end)
        if slot not in ran[f"tick-{i:02d}"]
    ]
