"""The delivery service against a real Postgres and a real HTTP receiver: what is posted,
what a 2xx, a 500 or no receiver at all leads to, retries with backoff and the 24-hour
limit (explicit ``now``), order per job, leases between nodes, and secrets that stay on the
node."""

from __future__ import annotations

import json
from datetime import datetime, timedelta
from typing import Any

import pytest

from cluster.alerts.rules import SIGNATURE_HEADER, verify
from cluster.settings import ClusterSettings
from cluster.store.housekeeping.alerts import AlertStore
from cluster.store.jobstore.store import JobStore
from node.maintenance.outbox import MAX_AGE_S, AlertDelivery, retry_delay_s
from node.stats import Stats
from tests.helpers.examples import documented, json_differs
from tests.helpers.outbox import T0, add_rule, at, events, every_10s, run_slot, sql
from tests.helpers.receiver import Receiver, local_config, receiver
from tests.helpers.sessions import Opener

pytestmark = pytest.mark.timeout(60)
SECRET = "s3cret-signing-key"


@pytest.fixture
async def alerts(settings: ClusterSettings) -> Any:
    async with AlertStore.open(settings, "n1/alerts") as store:
        yield store


def service(alerts: AlertStore, node_id: str = "n1", **kw: Any) -> AlertDelivery:
    return AlertDelivery(alerts, node_id, Stats(), **{"config": local_config, **kw})


async def failures(store: JobStore, open_session: Opener, *slots: float) -> None:
    """Job ``a`` fails the given slots (each raises a ``failed`` event)."""
    await store.definitions.apply([every_10s("a")], now=T0)
    node = await open_session("n0")
    for slot in slots:
        await run_slot(node, at(slot), "failed", f"boom at {slot:g}")


async def db_now(settings: ClusterSettings) -> datetime:
    (row,) = await sql(settings, "SELECT now() AS t")
    value: datetime = row["t"]
    return value


async def test_an_event_is_posted_once_signed_with_its_id_as_idempotency_key(
    store: JobStore, settings: ClusterSettings, open_session: Opener, alerts: AlertStore
) -> None:
    with receiver() as r:
        await add_rule(settings, "ops", r.url + "?token=t0k3n", secret_env="HOOK_SECRET")
        await failures(store, open_session, 10)
        deliver = service(alerts, environ={"HOOK_SECRET": SECRET})
        assert await deliver.run_once() == 0.0  # delivered: look again at once
        assert await deliver.run_once() is None  # nothing left
        (request,) = r.received()
    (event,) = await events(settings)
    assert (event["status"], event["attempts"]) == ("delivered", 1)
    assert request.path == "/hook?token=t0k3n"
    assert request.headers["Content-Type"] == "application/json"
    assert request.headers["Idempotency-Key"] == str(event["id"])
    assert request.signed_with(SECRET) and not request.signed_with("another-key")
    assert SIGNATURE_HEADER not in request.headers, "the replayable one only on request"
    sent = request.json()
    assert (sent["event"], sent["job"], sent["tenant"], sent["error"]) == (
        "failed",
        "a",
        "default",
        "boom at 10",
    )
    assert sent["slot"] == at(10).isoformat() and sent["id"] == str(event["id"])
    assert json_differs(json.loads("\n".join(documented("docs/alerts.md#payload"))), sent) == []


async def test_slack_format_posts_a_text(
    store: JobStore, settings: ClusterSettings, open_session: Opener, alerts: AlertStore
) -> None:
    with receiver() as r:
        await add_rule(settings, "chat", r.url, format="slack")
        await failures(store, open_session, 10)
        await service(alerts).run_once()
        (request,) = r.received()
    assert set(request.json()) == {"text"}
    assert "job a (tenant default)" in request.json()["text"]
    assert SIGNATURE_HEADER not in request.headers


async def test_the_body_only_signature_is_sent_only_for_a_rule_that_asks(
    store: JobStore, settings: ClusterSettings, open_session: Opener, alerts: AlertStore
) -> None:
    with receiver() as r:
        await add_rule(settings, "old", r.url, secret_env="HOOK_SECRET", legacy_signature=True)
        await failures(store, open_session, 10)
        await service(alerts, environ={"HOOK_SECRET": SECRET}).run_once()
        (request,) = r.received()
    assert request.signed_with(SECRET)
    assert verify(request.body, SECRET, request.headers[SIGNATURE_HEADER])


async def test_a_failed_attempt_is_retried_with_backoff_and_given_up_after_a_day(
    store: JobStore, settings: ClusterSettings, open_session: Opener, alerts: AlertStore
) -> None:
    with receiver(status=500) as r:
        await add_rule(settings, "ops", r.url + "/T0K3N?key=QU3RY-K3Y")
        await failures(store, open_session, 10)
        deliver = service(alerts)
        start = await db_now(settings)
        await deliver.run_once(now=start)
        (row,) = await events(settings)
        assert (row["status"], row["attempts"]) == ("pending", 1)
        (listed,) = await alerts.deliveries()
        assert listed.last_error == "HTTP 500 (Internal Server Error)"
        assert listed.next_attempt_at == start + timedelta(seconds=retry_delay_s(1))
        # Not due before its backoff ends; due after.
        await deliver.run_once(now=start + timedelta(seconds=4))
        assert len(r.received()) == 1
        await deliver.run_once(now=start + timedelta(seconds=5))
        assert len(r.received()) == 2
        (listed,) = await alerts.deliveries()
        assert listed.next_attempt_at == start + timedelta(seconds=5 + retry_delay_s(2))
        # Close to a day after the event, a failed attempt whose next try would be past
        # the limit gives up.
        late = row["created_at"] + timedelta(seconds=MAX_AGE_S - 1)
        await deliver.run_once(now=late)
        assert len(r.received()) == 3
    (listed,) = await alerts.deliveries()
    assert (listed.status, listed.attempts, listed.last_error) == (
        "failed",
        3,
        "HTTP 500 (Internal Server Error)",
    )
    assert [d.id for d in await alerts.deliveries("failed")] == [listed.id]
    assert await alerts.deliveries("pending") == []
    stored = json.dumps(await sql(settings, "SELECT * FROM alert_deliveries"), default=str)
    # Markers no UUID, timestamp or status holds: neither the path nor the query is kept.
    assert "T0K3N" not in stored and "QU3RY-K3Y" not in stored


def test_backoff_doubles_from_five_seconds_up_to_ten_minutes() -> None:
    assert [retry_delay_s(n) for n in (1, 2, 3, 4, 7, 8, 50)] == [
        5.0,
        10.0,
        20.0,
        40.0,
        320.0,
        600.0,
        600.0,
    ]


async def test_a_receiver_that_is_down_gets_the_events_in_order_when_it_is_back(
    store: JobStore, settings: ClusterSettings, open_session: Opener, alerts: AlertStore
) -> None:
    r = Receiver().start()
    url = r.url
    r.stop()  # down: connections are refused
    try:
        await add_rule(settings, "ops", url)
        await failures(store, open_session, 10, 20, 30)
        deliver = service(alerts)
        start = await db_now(settings)
        await deliver.run_once(now=start)
        first, *later = await events(settings)
        assert (first["attempts"], first["status"]) == (1, "pending")
        assert [e["attempts"] for e in later] == [0, 0]  # held back behind the first
        (listed, *_) = sorted(await alerts.deliveries(), key=lambda d: d.id)
        assert listed.last_error is not None and "ConnectError" in listed.last_error
        r.start()  # back, on the same port
        when = start
        for _ in range(10):
            when += timedelta(minutes=10)
            await deliver.run_once(now=when)
        got = [req.json()["error"] for req in r.received()]
    finally:
        r.stop()
    assert got == ["boom at 10", "boom at 20", "boom at 30"]
    assert {e["status"] for e in await events(settings)} == {"delivered"}


async def test_deliveries_of_different_jobs_do_not_wait_for_each_other(
    store: JobStore, settings: ClusterSettings, open_session: Opener, alerts: AlertStore
) -> None:
    with receiver() as good, receiver(status=503) as bad:
        await store.definitions.apply([every_10s("a"), every_10s("b")], now=T0)
        await add_rule(settings, "to-bad", bad.url, job="a")
        await add_rule(settings, "to-good", good.url)
        await run_slot(await open_session("n0"), at(10), "failed")
        await service(alerts).run_once()
        assert sorted(req.json()["job"] for req in good.received()) == ["a", "b"]
        assert [req.json()["job"] for req in bad.received()] == ["a"]


async def test_a_leased_delivery_is_taken_over_only_after_its_lease(
    store: JobStore, settings: ClusterSettings, open_session: Opener, alerts: AlertStore
) -> None:
    with receiver() as r:
        await add_rule(settings, "ops", r.url)
        await failures(store, open_session, 10)
        start = await db_now(settings)
        # n1 leases it and dies before answering (nothing is posted).
        (held,) = await alerts.claim("n1", 10, 20.0, now=start)
        async with AlertStore.open(settings, "n2/alerts") as other:
            n2 = service(other, "n2")
            await n2.run_once(now=start + timedelta(seconds=19))
            assert r.received() == []
            await n2.run_once(now=start + timedelta(seconds=21))
            assert len(r.received()) == 1
        # n1's late result is fenced: the delivery stays n2's, delivered at attempt 2.
        assert not await alerts.delivered(held, "n1")
    (row,) = await events(settings)
    assert (row["status"], row["attempts"]) == ("delivered", 2)


async def test_a_node_without_the_secret_leaves_the_delivery_to_another_within_seconds(
    store: JobStore,
    settings: ClusterSettings,
    open_session: Opener,
    alerts: AlertStore,
    caplog: pytest.LogCaptureFixture,
) -> None:
    with receiver() as r:
        await add_rule(settings, "ops", r.url, secret_env="HOOK_SECRET")
        await failures(store, open_session, 10)
        start = await db_now(settings)
        unsigned = service(alerts, environ={})
        # A node's missing variable is no failure of the receiver: however often a node
        # without it takes the delivery, it is due again 5 s later, not backed off.
        for attempt in range(4):
            at = start + timedelta(seconds=6 * attempt)
            await unsigned.run_once(now=at)
            (listed,) = await alerts.deliveries()
            assert (listed.status, listed.last_error, listed.next_attempt_at) == (
                "pending",
                "$HOOK_SECRET is not set on node n1",
                at + timedelta(seconds=5),
            )
        assert r.received() == []
        assert caplog.text.count("HOOK_SECRET") == 1, "one warning a minute, no other line"
        signer = service(alerts, environ={"HOOK_SECRET": SECRET})
        await signer.run_once(now=start + timedelta(seconds=24))
        (request,) = r.received()
    assert request.signed_with(SECRET)
    assert SECRET not in caplog.text
    stored = json.dumps(await sql(settings, "SELECT * FROM alert_deliveries"), default=str)
    assert SECRET not in stored


async def test_removing_a_rule_drops_its_undelivered_events(
    store: JobStore, settings: ClusterSettings, open_session: Opener, alerts: AlertStore
) -> None:
    await add_rule(settings, "ops", "http://127.0.0.1:9/hook")
    await failures(store, open_session, 10)
    assert len(await alerts.deliveries("pending")) == 1
    await alerts.remove_rule("ops")
    assert await alerts.deliveries() == []
