"""The handler threads: threads start on demand and are reused, a call cancelled while it
waits for a thread never runs, a call cancelled while it runs leaves its thread stuck
without taking a thread from later calls (up to ``concurrency`` stuck ones, then calls
wait, with one warning), and a pool whose threads are busy but not stuck says nothing.

The executor's tests (test_executor.py) cover the same through timeouts of real runs.
"""

from __future__ import annotations

import asyncio
import sys
import threading
from collections.abc import Callable, Iterator

import pytest

from node.threads import HandlerThreads

WAIT_S = 20.0


def threads_of(pool: HandlerThreads) -> int:
    return sum(t.name.startswith(f"{pool.name}_") for t in threading.enumerate())


def stuck_warnings(caplog: pytest.LogCaptureFixture) -> int:
    return sum(getattr(r, "event", "") == "handler_threads_stuck" for r in caplog.records)


@pytest.fixture
def release() -> Iterator[threading.Event]:
    event = threading.Event()
    yield event
    event.set()  # no thread of a failed test stays blocked


def blocking(release: threading.Event, started: list[int]) -> Callable[[int], int]:
    def blocks(n: int) -> int:
        started.append(n)
        release.wait(WAIT_S)
        return n

    return blocks


async def until(predicate: Callable[[], bool]) -> None:
    async with asyncio.timeout(WAIT_S):
        while not predicate():  # noqa: ASYNC110 - a poll with a deadline
            await asyncio.sleep(0.01)


async def stick(pool: HandlerThreads, release: threading.Event, started: list[int], n: int) -> None:
    """A call cancelled while it runs: its thread stays in it until ``release``."""
    call = asyncio.ensure_future(pool.call(blocking(release, started), n))
    await until(lambda: n in started)
    call.cancel()
    with pytest.raises(asyncio.CancelledError):
        await call


async def test_calls_one_after_another_reuse_threads_and_errors_come_back() -> None:
    pool = HandlerThreads(10)
    assert threads_of(pool) == 0, "threads start on demand"
    assert [await pool.call(lambda n: n * 2, i) for i in range(100)] == [i * 2 for i in range(100)]
    # A thread counts as idle only after its result is handed over: the next call may come
    # first and start a second thread, never more.
    assert threads_of(pool) <= 2
    with pytest.raises(SystemExit):
        await pool.call(sys.exit, 3)
    pool.shutdown()


async def test_calls_at_the_same_time_each_get_a_thread(release: threading.Event) -> None:
    pool = HandlerThreads(5)
    started: list[int] = []
    calls = [asyncio.ensure_future(pool.call(blocking(release, started), i)) for i in range(5)]
    await until(lambda: len(started) == 5)
    assert threads_of(pool) == 5
    release.set()
    assert await asyncio.gather(*calls) == list(range(5))
    pool.shutdown()


async def test_a_call_cancelled_while_it_waits_for_a_thread_never_runs(
    release: threading.Event,
) -> None:
    pool = HandlerThreads(1)  # two threads
    started: list[int] = []
    busy = [asyncio.ensure_future(pool.call(blocking(release, started), i)) for i in range(2)]
    await until(lambda: len(started) == 2)
    waiting = asyncio.ensure_future(pool.call(blocking(release, started), 99))
    await asyncio.sleep(0)
    waiting.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiting
    assert pool.stuck == 0, "a call that never started holds no thread"
    release.set()
    await asyncio.gather(*busy)
    assert await pool.call(lambda n: n, 7) == 7
    assert 99 not in started
    pool.shutdown()


async def test_stuck_threads_do_not_take_threads_from_later_calls_up_to_the_cap(
    release: threading.Event, caplog: pytest.LogCaptureFixture
) -> None:
    pool = HandlerThreads(2)  # four threads
    started: list[int] = []
    for i in range(2):
        await stick(pool, release, started, i)
    assert pool.stuck == 2 and stuck_warnings(caplog) == 0
    # Two calls at once still find a thread each.
    running = [asyncio.ensure_future(pool.call(blocking(release, started), i)) for i in (2, 3)]
    await until(lambda: len(started) == 4)
    assert threads_of(pool) == 4
    # One more stuck than the cap: the node says so, once.
    for call in running:
        call.cancel()
    await asyncio.gather(*running, return_exceptions=True)
    assert pool.stuck == 4 and stuck_warnings(caplog) == 1
    # Now a call waits for a thread to come free.
    waiting = asyncio.ensure_future(pool.call(lambda n: n, 5))
    await asyncio.sleep(0.05)
    assert not waiting.done()
    release.set()
    assert await waiting == 5
    await until(lambda: pool.stuck == 0)
    assert threads_of(pool) == 4 and stuck_warnings(caplog) == 1
    pool.shutdown()


async def test_busy_threads_at_the_cap_are_not_said_to_be_stuck(
    release: threading.Event, caplog: pytest.LogCaptureFixture
) -> None:
    pool = HandlerThreads(1)
    started: list[int] = []
    calls = [asyncio.ensure_future(pool.call(blocking(release, started), i)) for i in range(3)]
    await until(lambda: len(started) == 2)
    assert threads_of(pool) == 2 and pool.stuck == 0 and stuck_warnings(caplog) == 0
    release.set()
    assert await asyncio.gather(*calls) == [0, 1, 2]
    pool.shutdown()


async def test_shutdown_leaves_a_stuck_thread_behind_without_waiting(
    release: threading.Event,
) -> None:
    pool = HandlerThreads(1)
    await stick(pool, release, [], 0)
    pool.shutdown()  # returns at once
    assert pool.stuck == 1 and threads_of(pool) == 1
    release.set()
    await until(lambda: threads_of(pool) == 0 and pool.stuck == 0)
