"""wait_any: returns on the first event set or at its timeout, with Signals or plain events."""

from __future__ import annotations

import asyncio
import time

import pytest

from node.service import Signal, until_beat, wait_any


async def test_returns_when_a_signal_is_set_and_forgets_its_future() -> None:
    first, second = Signal(), Signal()
    loop = asyncio.get_running_loop()
    loop.call_soon(second.set)
    started = time.monotonic()
    await wait_any(60.0, first, second)
    assert second.is_set() and not first.is_set()
    assert time.monotonic() - started < 30.0  # woken by the event, not the timeout
    assert not first._watchers and not second._watchers


async def test_times_out_when_nothing_is_set() -> None:
    signal = Signal()
    started = time.monotonic()
    await wait_any(0.05, signal)
    assert time.monotonic() - started >= 0.04
    assert not signal.is_set() and not signal._watchers


async def test_returns_at_once_when_an_event_is_already_set() -> None:
    signal = Signal()
    signal.set()
    await asyncio.wait_for(wait_any(60.0, signal, asyncio.Event()), 5.0)


async def test_plain_events_still_wake_it() -> None:
    plain, signal = asyncio.Event(), Signal()
    asyncio.get_running_loop().call_soon(plain.set)
    await asyncio.wait_for(wait_any(60.0, signal, plain), 5.0)
    assert plain.is_set()


async def test_a_cancelled_wait_leaves_no_future_behind() -> None:
    signal = Signal()
    task = asyncio.create_task(wait_any(60.0, signal))
    await asyncio.sleep(0)
    assert len(signal._watchers) == 1
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert not signal._watchers
    signal.set()  # nothing left to resolve


async def test_a_signal_wakes_every_waiter() -> None:
    signal = Signal()
    waiters = [asyncio.create_task(wait_any(60.0, signal)) for _ in range(3)]
    await asyncio.sleep(0)
    signal.set()
    await asyncio.wait_for(asyncio.gather(*waiters), 5.0)


@pytest.mark.parametrize("interval_s", [0.5, 1.0, 2.0, 5.0])
def test_a_beat_is_between_a_quarter_and_one_and_a_quarter_periods_away(
    interval_s: float,
) -> None:
    for now in (0.0, 0.3, 1234.56, time.monotonic()):
        assert interval_s / 4 <= until_beat(interval_s, now) <= interval_s * 1.25


def test_beats_of_different_periods_coincide() -> None:
    """A 2 s service wakes on a beat of the 1 s services: one wake-up for both."""
    for now in (0.0, 0.3, 1234.56, time.monotonic()):
        one, two = now + until_beat(1.0, now), now + until_beat(2.0, now)
        apart = two - one
        assert abs(apart - round(apart)) < 1e-6
