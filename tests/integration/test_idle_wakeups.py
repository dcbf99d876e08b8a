"""The NOTIFY wake-ups that let idle services sleep, against a real Postgres: a queued alert
delivery wakes alert delivery (migration 028), an event no rule wants sends nothing, and a
backfill request wakes the backfiller of the node holding its shard, through the node's
own listener on its own connection; a restarted node's taken-back flights wake the holder
of their shard."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import timedelta

import pytest

from cluster.settings import ClusterSettings
from cluster.store import notify
from cluster.store.jobstore.store import JobStore
from node.maintenance.recovery import Recovery
from node.pipeline.listener import WakeListener
from node.service import Signal
from node.state import NodeState
from node.stats import Stats
from tests.helpers.flights import allow_job, handed
from tests.helpers.outbox import T0, add_rule, at, every_10s, run_slot, sql
from tests.helpers.sessions import ALL, Opener
from tests.helpers.waiting import until

pytestmark = pytest.mark.timeout(60)
MARKER = 9_000_000  # and up: shards no node holds, which the listener passes over


class Heard:
    """A node's listener (``WakeListener`` on ``notify.listen``) and every payload it got."""

    def __init__(self, settings: ClusterSettings, held: frozenset[int] = frozenset()) -> None:
        self.settings = settings
        self.state = NodeState("n1", "a", 16, held=held)
        self.payloads: list[str] = []
        self._markers = 0
        self._listener = WakeListener(settings, self.state, Signal())

    def on_notify(self, payload: str) -> None:
        self.payloads.append(payload)
        self._listener.on_notify(payload)

    async def listening(self) -> None:
        """Until the listener hears a marker (its LISTEN may not have run yet)."""

        async def heard_one() -> bool:
            await self._send_marker()
            return any(int(p) >= MARKER for p in self.payloads if p.isdigit())

        await until(heard_one, "the listener to listen", interval_s=0.1)
        await self.marker()  # the markers sent before it was heard are in by now

    async def _send_marker(self) -> str:
        self._markers += 1
        marker = str(MARKER + self._markers)
        await sql(self.settings, "SELECT pg_notify(%s, %s)", (self.settings.wake_channel, marker))
        return marker

    async def marker(self) -> list[str]:
        """What was heard before a NOTIFY sent now: notifications arrive in commit order,
        so one that was not heard by then was never sent."""
        marker = await self._send_marker()
        await until(lambda: marker in self.payloads, "the marker NOTIFY")
        before = self.payloads[: self.payloads.index(marker)]
        del self.payloads[: self.payloads.index(marker) + 1]
        return [p for p in before if not (p.isdigit() and int(p) >= MARKER)]


@pytest.fixture
async def heard(settings: ClusterSettings, store: JobStore) -> AsyncIterator[Heard]:
    found = Heard(settings, held=frozenset(range(16)))
    stop = Signal()
    task = asyncio.create_task(notify.listen(settings, "n1", found.on_notify, stop))
    await found.listening()
    yield found
    stop.set()
    await task


async def test_a_queued_delivery_wakes_alert_delivery(
    store: JobStore, settings: ClusterSettings, open_session: Opener, heard: Heard
) -> None:
    await add_rule(settings, "ops", "https://hooks.example.com/x", events=["failed"])
    await store.definitions.apply([every_10s("a")], now=T0)
    node = await open_session("n0")
    await run_slot(node, at(10), "failed", "boom")
    assert await until(heard.state.alerts.is_set, "the alerts wake-up")
    assert notify.ALERT_QUEUED in await heard.marker()


async def test_an_event_no_rule_wants_wakes_nobody(
    store: JobStore, settings: ClusterSettings, open_session: Opener, heard: Heard
) -> None:
    await add_rule(settings, "ops", "https://hooks.example.com/x", events=["paused"])
    await store.definitions.apply([every_10s("a")], now=T0)
    node = await open_session("n0")
    await run_slot(node, at(10), "failed", "boom")  # a `failed` event: no rule wants it
    assert notify.ALERT_QUEUED not in await heard.marker()
    assert not heard.state.alerts.is_set()
    (row,) = await sql(settings, "SELECT count(*) AS n FROM alert_events")
    assert row["n"] == 0


async def test_a_backfill_request_wakes_the_backfiller_of_its_shard(
    store: JobStore, settings: ClusterSettings, heard: Heard
) -> None:
    await store.definitions.apply([every_10s("a")], now=T0 - timedelta(hours=1))
    job = await store.get("a")
    await heard.marker()  # the job's creation NOTIFYed its shard too
    heard.state.shard_written.clear()
    await store.runcontrol.backfill(
        "a", "default", start=T0 - timedelta(hours=2), end=T0 - timedelta(hours=1)
    )
    assert await until(heard.state.shard_written.is_set, "the backfiller's wake-up")
    assert str(job.shard) in await heard.marker()


async def test_a_write_to_a_shard_held_elsewhere_wakes_no_backfiller(
    store: JobStore, settings: ClusterSettings
) -> None:
    await store.definitions.apply([every_10s("a")], now=T0 - timedelta(hours=1))
    job = await store.get("a")
    other = Heard(settings, held=frozenset(range(16)) - {job.shard})
    stop = Signal()
    task = asyncio.create_task(notify.listen(settings, "n1", other.on_notify, stop))
    try:
        await other.listening()
        await store.runcontrol.backfill(
            "a", "default", start=T0 - timedelta(hours=2), end=T0 - timedelta(hours=1)
        )
        assert str(job.shard) in await other.marker()
        assert not other.state.shard_written.is_set()
        assert not other.state.wake.is_set()
    finally:
        stop.set()
        await task


async def test_a_restarted_nodes_taken_back_flight_wakes_the_holder_of_its_shard(
    store: JobStore, settings: ClusterSettings, open_session: Opener, heard: Heard
) -> None:
    # node-a runs a flight of an `allow` job, dies, and starts again under its own id: the
    # flight is queued again in a shard another node may hold, which hears of it at once
    # rather than at its next idle flight poll (docs/design/beat.md).
    await allow_job(store)
    before = await open_session("node-a")
    (job,) = (await before.claim(ALL, 10, 30.0, now=at(10))).jobs
    await before.completions.spawn([handed(job, at(20))], [], 30.0, now=at(10))
    await before.close()
    await heard.marker()
    heard.state.flights_written = False
    after = await open_session("node-a")
    state = NodeState("node-a", "a", 16)
    assert await Recovery(state, after, Stats()).recover_own() == 1
    assert str(job.shard) in await heard.marker()
    assert heard.state.flights_written
