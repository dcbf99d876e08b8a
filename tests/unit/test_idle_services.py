"""Services that sleep while they find nothing to do: the backfiller asks Postgres again only
when its held shards change, a write to one is NOTIFYed, or its idle interval passed (an
explicit clock), and alert delivery waits its idle interval after an empty pass."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, cast

from cluster.store.housekeeping.alerts import AlertStore
from cluster.store.side import SideConnection
from node.maintenance.backfiller import IDLE_POLL_S, Backfiller
from node.maintenance.outbox import IDLE_S, INTERVAL_S, AlertDelivery
from node.state import NodeState
from node.stats import Stats


class Side:
    """Stands in for the backfiller's connection: every held shard without a backfill."""

    def __init__(self) -> None:
        self.asked: list[list[int]] = []

    async def fetch(self, name: str, params: Mapping[str, Any] | None = None) -> list[Any]:
        assert name == "backfills_any" and params is not None
        self.asked.append(list(params["shards"]))
        return [{"any": False}]


def backfiller(held: frozenset[int]) -> tuple[Backfiller, Side, NodeState]:
    state = NodeState("n1", "a", 16, held=held)
    side = Side()
    queued: list[None] = []
    made = Backfiller(cast(SideConnection, side), state, Stats(), lambda: queued.append(None))
    return made, side, state


async def test_an_idle_backfiller_asks_once_per_idle_interval() -> None:
    made, side, _ = backfiller(frozenset({1, 2}))
    await made.poll(clock=100.0)
    await made.poll(clock=101.0)
    await made.poll(clock=100.0 + IDLE_POLL_S - 0.01)
    assert side.asked == [[1, 2]]
    await made.poll(clock=100.0 + IDLE_POLL_S)
    assert side.asked == [[1, 2], [1, 2]]


async def test_new_held_shards_are_asked_about_at_once() -> None:
    made, side, state = backfiller(frozenset({1, 2}))
    await made.poll(clock=100.0)
    state.held = frozenset({1, 2, 3})
    await made.poll(clock=101.0)
    await made.poll(clock=102.0)
    assert side.asked == [[1, 2], [1, 2, 3]]


async def test_a_write_to_a_held_shard_wakes_it_once() -> None:
    made, side, state = backfiller(frozenset({5}))
    await made.poll(clock=100.0)
    state.shard_written.set()  # the listener heard a NOTIFY of shard 5 (a new request)
    await made.poll(clock=101.0)
    assert not state.shard_written.is_set()
    await made.poll(clock=102.0)
    assert side.asked == [[5], [5]]


async def test_no_held_shard_asks_nothing() -> None:
    made, side, _ = backfiller(frozenset())
    await made.poll(clock=100.0)
    await made.poll(clock=100.0 + IDLE_POLL_S)
    assert side.asked == []


class Outbox:
    """Stands in for the alert store: an empty outbox."""

    def __init__(self) -> None:
        self.claims = 0

    async def claim(self, node_id: str, limit: int, lease_s: float, now: Any = None) -> list[Any]:
        self.claims += 1
        return []


async def test_an_empty_outbox_is_asked_again_after_the_idle_interval() -> None:
    outbox = Outbox()
    delivery = AlertDelivery(cast(AlertStore, outbox), "n1", Stats())
    delay = await delivery.poll()
    assert outbox.claims == 1
    # On this process's beat of IDLE_S (node.service.until_beat): later than the busy
    # interval, never later than one idle interval.
    assert INTERVAL_S < IDLE_S / 4 <= delay <= IDLE_S * 1.25
