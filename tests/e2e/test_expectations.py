"""Expectations end to end: two real node processes run jobs whose runs are slow, too fast,
or whose metrics (from ``ctx.metric`` and a shell command's ``$PULSE_METRICS_FILE``) fail
their ``--assert``; each event reaches a real HTTP receiver once, though both nodes run the
late pass every few seconds while the slow run goes on. No sleeps: every step waits for
what it needs to see, with a deadline.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from typing import Any

import pytest

from cluster.alerts.rules import AlertRule
from cluster.jobs.spec import JobSpec
from cluster.settings import ClusterSettings
from cluster.store.alerts import AlertStore
from cluster.store.jobs import JobStore
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
