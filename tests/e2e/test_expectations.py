"""Expectations end to end: two real node processes run jobs whose runs are slow, too fast,
past their wall-clock deadline, or whose metrics (from ``ctx.metric`` and a shell command's
``$PULSE_METRICS_FILE``) fail their ``--assert``; each event reaches a real HTTP receiver
once, though both nodes run the late pass every few seconds while the run goes on, and a
frozen (SIGSTOPped) node's slow run is reported by the other. No sleeps: every step waits
for what it needs to see, with a deadline.
"""

from __future__ import annotations

import asyncio
import signal
from collections import Counter
from datetime import datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

import pytest

from cluster.alerts.rules import AlertRule
from cluster.jobs.spec import JobSpec
from cluster.settings import ClusterSettings
from cluster.store.housekeeping.alerts import AlertStore
from cluster.store.jobstore.store import JobStore
from tests.helpers.fleet import Fleet
from tests.helpers.nodes import init_cluster
from tests.helpers.receiver import Request, allow_local, receiver
from tests.helpers.waiting import until

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(150)]
WITNESS = "cluster.chaos.witness:record"
EVENTS = "slow,overdue,too_fast,assertion_failed,failed"


def store_call(settings: ClusterSettings, fn: Any) -> Any:
    async def go() -> Any:
        async with JobStore.open(settings) as store:
            return await fn(store)

    return asyncio.run(go())


def kinds(requests: list[Request]) -> Counter[tuple[str, str]]:
    return Counter((r.json()["event"], r.json()["job"]) for r in requests)


def finished(settings: ClusterSettings, name: str) -> bool:
    runs = store_call(settings, lambda s: s.runs(name))
    return bool(runs) and runs[0].status != "running"


def test_each_expectation_reaches_the_receiver_once(
    fleet: Fleet, settings: ClusterSettings
) -> None:
    init_cluster(
        settings,
        JobSpec.build("slowpoke", "@every 1h", WITNESS, payload={"sleep_s": 8}, expect_max="2s"),
        JobSpec.build("quick", "@every 1h", WITNESS, expect_min="1h"),
        JobSpec.build("counted", "@every 1h", "tests.e2e.alert_handlers:counts",
                      payload={"rows": 0}, asserts="rows > 0"),
        JobSpec.build("shell-count", "@every 1h", 'shell:echo rows=0 >> "$PULSE_METRICS_FILE"',
                      asserts="rows > 0", assert_fails=True),
        JobSpec.build("fine", "@every 1h", "tests.e2e.alert_handlers:counts",
                      payload={"rows": 5}, asserts="rows > 0", expect_max="1h"),
    )  # fmt: skip
    allow_local(settings)
    with receiver() as r:

        async def rule() -> None:
            async with AlertStore.open(settings) as alerts:
                await alerts.add_rule(AlertRule.build("ops", r.url, events=EVENTS))

        asyncio.run(rule())
        for node_id, zone in (("n1", "a"), ("n2", "b")):
            fleet.start(node_id, zone)
        names = ("slowpoke", "quick", "counted", "shell-count", "fine")
        for name in names:
            store_call(settings, lambda s, name=name: s.trigger(name))
        wanted = [
            ("slow", "slowpoke"), ("too_fast", "quick"), ("assertion_failed", "counted"),
            ("failed", "shell-count"),
        ]  # fmt: skip
        until(lambda: all(kinds(r.received())[k] for k in wanted), "every event", 60)
        # The slow run goes on past more late passes of both nodes; once it has ended and
        # everything is delivered, each event was raised and received once.
        for name in names:
            until(lambda name=name: finished(settings, name), f"{name} finished", 60)
        until(
            lambda: all(
                row["status"] == "delivered"
                for row in fleet.sql("SELECT status FROM alert_deliveries")
            ),
            "every delivery done",
            30,
        )
        assert kinds(r.received()) == Counter(wanted)
        (failed,) = [q for q in r.received() if q.json()["event"] == "failed"]
        assert failed.json()["error"] == "assertion failed: rows > 0 (rows=0)"
    counted = store_call(settings, lambda s: s.run("counted"))
    assert (counted.status, counted.metrics) == ("succeeded", {"rows": 0.0})
    shelled = store_call(settings, lambda s: s.run("shell-count"))
    assert (shelled.status, shelled.metrics) == ("failed", {"rows": 0.0})
    health = {n: store_call(settings, lambda s, n=n: s.get(n)).health()["state"] for n in names}
    assert health == {
        "slowpoke": "slow",
        "quick": "too_fast",
        "counted": "assertion_failed",
        "shell-count": None,  # --assert-fails: its failed run is a `failed` event
        "fine": "ok",
    }


def _stopped(pid: int) -> bool:
    with open(f"/proc/{pid}/stat") as stat:
        return stat.read().rsplit(")", 1)[1].split()[0] == "T"


@pytest.mark.slow
def test_a_frozen_nodes_slow_run_is_reported_by_another_node_once(
    fleet: Fleet, settings: ClusterSettings
) -> None:
    init_cluster(
        settings,
        JobSpec.build("stuck", "@every 1h", WITNESS, payload={"sleep_s": 12}, expect_max="3s"),
    )
    allow_local(settings)
    with receiver() as r:

        async def rule() -> None:
            async with AlertStore.open(settings) as alerts:
                await alerts.add_rule(AlertRule.build("ops", r.url, events="slow"))

        asyncio.run(rule())
        for node_id, zone in (("n1", "a"), ("n2", "b")):
            # A long session timeout and no freeze limit: the frozen node keeps its run
            # while the others look.
            fleet.start(node_id, zone, "--session-timeout", "60s", "--freeze-limit", "0")
        store_call(settings, lambda s: s.trigger("stuck"))
        owner = until(
            lambda: store_call(settings, lambda s: s.get("stuck")).locked_by, "the claim", 30
        )
        frozen = fleet.node(owner)
        frozen.signal(signal.SIGSTOP)
        try:
            until(lambda: _stopped(frozen.pid), "the owner stopped", 10)
            until(lambda: kinds(r.received())[("slow", "stuck")], "the slow event", 30)
            (event,) = r.received()
        finally:
            frozen.signal(signal.SIGCONT)
        assert (event.json()["node"], event.json()["attempt"]) == (owner, 1)
        # Both nodes go on passing while the run goes on; once it has ended, still one.
        until(lambda: finished(settings, "stuck"), "the run's end", 60)
    assert len(fleet.sql("SELECT id FROM alert_events WHERE event = 'slow'")) == 1


@pytest.mark.slow
def test_a_run_going_on_past_its_deadline_is_overdue_once(
    fleet: Fleet, settings: ClusterSettings
) -> None:
    # The deadline is the next whole minute, in a zone other than UTC: the run goes on
    # until a few passes after it.
    zone = ZoneInfo("Asia/Kolkata")  # UTC+05:30: a wall clock half an hour off UTC's
    now = datetime.now(zone)
    boundary = now.replace(second=0, microsecond=0) + timedelta(minutes=1)
    if (boundary - now).total_seconds() < 10:
        boundary += timedelta(minutes=1)
    hold_s = (boundary - now).total_seconds() + 12
    init_cluster(
        settings,
        JobSpec.build("nightly", "@every 1h", WITNESS, tz="Asia/Kolkata",
                      deadline=boundary.strftime("%H:%M"), payload={"sleep_s": hold_s}),
    )  # fmt: skip
    allow_local(settings)
    with receiver() as r:

        async def rule() -> None:
            async with AlertStore.open(settings) as alerts:
                await alerts.add_rule(AlertRule.build("ops", r.url, events="overdue"))

        asyncio.run(rule())
        for node_id, zone_name in (("n1", "a"), ("n2", "b")):
            fleet.start(node_id, zone_name)
        store_call(settings, lambda s: s.trigger("nightly"))
        until(lambda: kinds(r.received())[("overdue", "nightly")], "the overdue event", 100)
        arrived = datetime.now(zone)
        until(lambda: finished(settings, "nightly"), "the run's end", 60)
    assert arrived >= boundary  # not before the deadline
    (event,) = r.received()
    detail = f"still running at its {boundary:%H:%M} deadline (Asia/Kolkata)"
    assert event.json()["summary"].endswith(detail)
    assert len(fleet.sql("SELECT id FROM alert_events WHERE event = 'overdue'")) == 1
