"""Alerts end to end: real node processes deliver the outbox to a real HTTP receiver.

Every kind of event reaches a healthy receiver once, signed, in order per job (a job that
fails twice in a row is paused by the same statement); a delivery whose node is SIGKILLed
while a slow receiver holds its request is delivered by another node after the lease; events
wait while the receiver is down and arrive in order when it is back; a slot in the shard of
a frozen node is reported late by another node. No sleeps: every step waits for what it
needs to see, with a deadline.
"""

from __future__ import annotations

import asyncio
import signal
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from cluster.alerts.rules import AlertRule, standard_signature
from cluster.jobs.spec import JobSpec
from cluster.settings import ClusterSettings
from cluster.store.housekeeping.alerts import AlertStore
from cluster.store.jobstore.store import JobStore
from tests.helpers.fleet import Fleet
from tests.helpers.nodes import init_cluster
from tests.helpers.receiver import Receiver, Request, allow_local, receiver
from tests.helpers.waiting import until

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(150)]
WITNESS = "cluster.chaos.witness:record"
SECRET_ENV = "E2E_HOOK_SECRET"
SECRET = "e2e-signing-key"


def store_call(settings: ClusterSettings, fn: Callable[[JobStore], Any]) -> Any:
    async def go() -> Any:
        async with JobStore.open(settings) as store:
            return await fn(store)

    return asyncio.run(go())


def _stopped(pid: int) -> bool:
    with open(f"/proc/{pid}/stat") as stat:
        return stat.read().rsplit(")", 1)[1].split()[0] == "T"


def add_rule(settings: ClusterSettings, url: str, **kw: Any) -> None:
    async def go() -> None:
        async with AlertStore.open(settings) as alerts:
            await alerts.add_rule(AlertRule.build("ops", url, **kw))

    asyncio.run(go())


def outbox(fleet: Fleet) -> list[dict[str, Any]]:
    return fleet.sql(
        "SELECT d.id AS delivery, d.status, d.attempts, d.locked_by, e.* FROM alert_deliveries d"
        " JOIN alert_events e ON e.id = d.event_id ORDER BY d.id"
    )


def kinds(requests: list[Request]) -> Counter[tuple[str, str]]:
    return Counter((r.json()["event"], r.json()["job"]) for r in requests)


def all_delivered(fleet: Fleet) -> bool:
    rows = outbox(fleet)
    return bool(rows) and all(r["status"] == "delivered" for r in rows)


def test_every_event_reaches_a_healthy_receiver_once_signed_and_in_order(
    fleet: Fleet, settings: ClusterSettings, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(SECRET_ENV, SECRET)  # the nodes inherit it
    paused = {"paused": True}
    init_cluster(
        settings,
        JobSpec.build("sleeper", "@every 1h", WITNESS, payload={"sleep_s": 20}, retries=1),
        JobSpec.build("broken", "@every 2s", WITNESS, payload={"fail": "boom"},
                      pause_after_failures=2, **paused),
        JobSpec.build("flaky", "@every 2s", "tests.e2e.alert_handlers:fails_once",
                      payload={"dir": str(tmp_path)}, **paused),
        JobSpec.build("slow", "@every 1s", WITNESS, payload={"sleep_s": 2.5}, **paused),
        JobSpec.build("behind", "@every 1h", WITNESS, late_after="1s", **paused),
    )  # fmt: skip
    allow_local(settings)
    with receiver() as r:
        add_rule(settings, r.url, secret_env=SECRET_ENV)
        for node_id, zone in (("n1", "a"), ("n2", "b")):
            fleet.start(node_id, zone)

        # lost: the node running "sleeper" is killed before any other event exists, so it
        # never held a delivery.
        store_call(settings, lambda s: s.trigger("sleeper"))
        owner = until(
            lambda: store_call(settings, lambda s: s.get("sleeper")).locked_by, "sleeper", 30
        )
        fleet.node(owner).signal(signal.SIGKILL)
        until(lambda: kinds(r.received())[("lost", "sleeper")], "the lost event", 30)

        # failed, paused, recovered, skipped and late, from the survivor.
        for name in ("broken", "flaky", "slow"):
            store_call(settings, lambda s, name=name: s.resume(name))
        fleet.sql(
            "UPDATE jobs SET paused = false, status = 'idle', pause_note = NULL,"
            " slot_at = date_trunc('hour', now()) - interval '1 hour',"
            " next_run_at = date_trunc('hour', now()) - interval '1 hour'"
            " WHERE name = 'behind' RETURNING id"
        )  # as if the cluster had been down for an hour
        wanted = [
            ("failed", "broken"), ("paused", "broken"), ("failed", "flaky"),
            ("recovered", "flaky"), ("skipped", "slow"), ("late", "behind"),
        ]  # fmt: skip
        try:
            until(lambda: all(kinds(r.received())[k] for k in wanted), "every kind", 60)
        except AssertionError as exc:
            raise AssertionError(f"{exc}: got {kinds(r.received())}\n{fleet.logs()}") from exc
        store_call(settings, lambda s: s.pause("slow"))
        until(lambda: all_delivered(fleet), "every delivery done", 30)
        assert fleet.node("n2" if owner == "n1" else "n1").running
        requests = r.received()

    events = outbox(fleet)
    assert all(e["status"] == "delivered" for e in events)
    # Once each: one request per event, answered 2xx, signed with the nodes' secret.
    keys = Counter(req.headers["Idempotency-Key"] for req in requests)
    assert keys == Counter(str(e["id"]) for e in events), (keys, events)
    assert all(200 <= req.status < 300 for req in requests)
    assert all(
        req.headers["webhook-signature"]
        == standard_signature(
            req.body, SECRET, req.headers["webhook-id"], int(req.headers["webhook-timestamp"])
        )
        and "X-Pulse-Signature" not in req.headers
        for req in requests
    )
    # In order per job, and the exact story of the jobs whose story is fixed.
    by_job: dict[str, list[str]] = {}
    for req in requests:
        by_job.setdefault(req.json()["job"], []).append(req.json()["id"])
    for job, ids in by_job.items():
        assert ids == [str(e["id"]) for e in events if e["job_name"] == job], job
    story = {job: [e["event"] for e in events if e["job_name"] == job] for job in by_job}
    assert story["sleeper"] == ["lost"]
    assert story["broken"] == ["failed", "failed", "paused"]
    assert story["flaky"] == ["failed", "recovered"]
    assert set(story["slow"]) == {"skipped"} and "late" in story["behind"]
    broken = store_call(settings, lambda s: s.get("broken"))
    assert broken.paused and broken.pause_note is not None
    assert broken.pause_note.startswith("paused after 2 failed slots in a row; last error: ")
    lost = next(e for e in events if e["event"] == "lost")
    assert (lost["node_id"], lost["detail"]) == (owner, f"owner gone (node {owner})")


def test_a_delivery_held_by_a_killed_node_is_delivered_by_another(
    fleet: Fleet, settings: ClusterSettings
) -> None:
    init_cluster(settings, JobSpec.build("broken", "@every 1h", WITNESS, payload={"fail": "x"}))
    allow_local(settings)
    with receiver(delay_s=60) as r:  # slow: holds the first request
        add_rule(settings, r.url, events="failed")
        for node_id, zone in (("n1", "a"), ("n2", "b")):
            fleet.start(node_id, zone)
        store_call(settings, lambda s: s.trigger("broken"))
        until(lambda: r.received(), "the first request", 30)
        (leased,) = outbox(fleet)
        holder = leased["locked_by"]
        fleet.node(holder).signal(signal.SIGKILL)  # mid-request
        r.delay_s = 0
        until(lambda: all_delivered(fleet), "delivery by the survivor", 60)
        requests = r.received()
    (row,) = outbox(fleet)
    assert (row["status"], row["attempts"]) == ("delivered", 2)
    assert [req.headers["Idempotency-Key"] for req in requests] == [str(row["id"])] * 2
    survivor = next(n for n in ("n1", "n2") if n != holder)
    assert "alert failed delivered to rule ops (attempt 2)" in fleet.node(survivor).tail(200)


def test_events_wait_for_a_receiver_that_is_down_and_arrive_in_order(
    fleet: Fleet, settings: ClusterSettings
) -> None:
    init_cluster(settings, JobSpec.build("broken", "@every 1s", WITNESS, payload={"fail": "x"}))
    allow_local(settings)
    r = Receiver().start()
    r.stop()  # down: its port refuses connections
    try:
        add_rule(settings, r.url, events="failed")
        for node_id, zone in (("n1", "a"), ("n2", "b")):
            fleet.start(node_id, zone)

        def tried_while_down() -> bool:
            rows = outbox(fleet)
            return len(rows) >= 4 and rows[0]["attempts"] >= 1

        until(tried_while_down, "events raised and tried while the receiver is down", 30)
        store_call(settings, lambda s: s.pause("broken"))
        until(
            lambda: store_call(settings, lambda s: s.get("broken")).status == "paused", "pause", 30
        )
        waiting = outbox(fleet)
        assert all(row["status"] == "pending" for row in waiting)
        r.start()  # back on the same port
        until(lambda: all_delivered(fleet), "delivery once the receiver is back", 60)
        requests = r.accepted()
    finally:
        r.stop()
    events = outbox(fleet)
    assert [req.json()["slot"] for req in requests] == [e["slot"].isoformat() for e in events]
    assert [e["slot"] for e in events] == sorted(e["slot"] for e in events)


@pytest.mark.slow
def test_a_slot_in_a_frozen_nodes_shard_is_reported_late_by_another_node(
    fleet: Fleet, settings: ClusterSettings
) -> None:
    init_cluster(settings, JobSpec.build("tick", "@every 2s", WITNESS, late_after="1s"))
    allow_local(settings)
    job = store_call(settings, lambda s: s.get("tick"))
    for node_id, zone in (("n1", "a"), ("n2", "b")):
        # A long session timeout, and no peer ending a frozen node's session: the frozen
        # owner keeps its lock while the late pass runs.
        fleet.start(node_id, zone, "--session-timeout", "40s", "--freeze-limit", "0")
    owner = until(lambda: fleet.holders().get(job.shard), "the shard's owner", 30)
    until(lambda: fleet.holders().get(job.shard) == owner, "a settled owner", 30)
    # Frozen with a slot claimed (claims run ahead), the job would stay running until its
    # lease ran out, and only an idle slot is late: freeze the owner with the job paused,
    # so with nothing in flight, then resume it.
    store_call(settings, lambda s: s.pause("tick"))
    until(lambda: store_call(settings, lambda s: s.get("tick")).status == "paused", "pause", 30)
    frozen = fleet.node(owner)
    frozen.signal(signal.SIGSTOP)
    try:
        until(lambda: _stopped(frozen.pid), "the owner stopped", 10)
        store_call(settings, lambda s: s.resume("tick"))

        def late_events() -> list[dict[str, Any]]:
            return fleet.sql("SELECT * FROM alert_events WHERE event = 'late'")

        add_rule(settings, "http://127.0.0.1:9/hook", events="late")
        (late, *_) = until(late_events, "a late event", 30)
        still_held = fleet.holders().get(job.shard)
    finally:
        frozen.signal(signal.SIGCONT)
    assert still_held == owner  # the owner was frozen with its lock: another node found it
    assert late["job_name"] == "tick" and late["node_id"] is None
    assert late["detail"].startswith("not started ")
