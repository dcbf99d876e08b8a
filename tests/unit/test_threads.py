"""The handler threads: a burst of short runs shares a few threads, runs queued behind
handlers that block get threads of their own (doubling at each check, never while a woken
thread has yet to reach the queue), a run abandoned in the queue never runs, a pool at its
cap with no thread stuck does not warn that threads are stuck, and ``call`` returns what
the handler returned or raises what it raised.

The executor's tests (test_executor.py) cover timeouts, stuck threads and their cap
through the executor; these drive the pool directly, with a patience long enough that no
timing decides what a test sees, or short where a test waits for what it causes.
"""

from __future__ import annotations

import asyncio
import sys
import threading
import time
from typing import Any

import pytest

from node.handlers.threads import HandlerThreads, ThreadRun

WAIT_S = 20.0


class Results:
    def __init__(self) -> None:
        self.runs: list[ThreadRun] = []
        self.changed = asyncio.Event()

    def __call__(self, batch: list[ThreadRun]) -> None:
        self.runs.extend(batch)
        self.changed.set()

    async def wait_for(self, count: int) -> None:
        async with asyncio.timeout(WAIT_S):
            while len(self.runs) < count:
                self.changed.clear()
                await self.changed.wait()


async def test_a_burst_of_short_runs_takes_the_eager_thread_only() -> None:
    results = Results()
    pool = HandlerThreads(100, results, patience_s=WAIT_S)
    for i in range(100):
        pool.submit(ThreadRun(lambda n: n * 2, i, i))
    await results.wait_for(100)
    assert sorted(r.result for r in results.runs) == [i * 2 for i in range(100)]
    assert pool.threads == 1
    pool.shutdown()


async def test_a_finished_run_reaches_the_loop_while_its_thread_blocks_in_the_next() -> None:
    results = Results()
    pool = HandlerThreads(10, results, eager=1, patience_s=0.01)
    release = threading.Event()
    pool.submit(ThreadRun(lambda n: n, "quick", "quick"))
    pool.submit(ThreadRun(lambda _: release.wait(WAIT_S), "blocks", "blocks"))
    await results.wait_for(1)  # the patience check collects it; the worker is not done
    assert [r.key for r in results.runs] == ["quick"] and not release.is_set()
    release.set()
    await results.wait_for(2)
    pool.shutdown()


async def submit_blocking(
    pool: HandlerThreads, count: int, release: threading.Event, *, until_started: int
) -> list[int]:
    """Submit ``count`` runs that block until ``release``; return once ``until_started``
    of them run (the list of those started)."""
    started: list[int] = []

    def blocks(n: int) -> None:
        started.append(n)
        release.wait(WAIT_S)

    for i in range(count):
        pool.submit(ThreadRun(blocks, i, i))
    async with asyncio.timeout(WAIT_S):
        while len(started) < until_started:  # noqa: ASYNC110 - a poll with a deadline
            await asyncio.sleep(0.01)
    return started


async def test_runs_queued_behind_handlers_that_block_get_threads_of_their_own() -> None:
    results = Results()
    pool = HandlerThreads(10, results, eager=1, patience_s=0.01)
    release = threading.Event()
    started = await submit_blocking(pool, 5, release, until_started=5)
    assert sorted(started) == [0, 1, 2, 3, 4] and pool.threads == 5
    release.set()
    await results.wait_for(5)
    pool.shutdown()


async def test_a_run_abandoned_while_queued_never_runs() -> None:
    results = Results()
    pool = HandlerThreads(10, results, eager=1, patience_s=WAIT_S)
    release = threading.Event()
    ran: list[Any] = []

    def first(_: None) -> None:
        ran.append("first")
        release.wait(WAIT_S)

    pool.submit(ThreadRun(first, None, "first"))
    queued = ThreadRun(ran.append, "queued", "queued")
    pool.submit(queued)
    pool.abandon(queued)
    assert pool.stuck == 0, "a queued run holds no thread"
    release.set()
    await results.wait_for(1)
    following = ThreadRun(ran.append, "following", "following")
    pool.submit(following)
    await results.wait_for(2)
    assert ran == ["first", "following"] and pool.threads == 1
    pool.shutdown()


async def test_at_the_cap_with_no_thread_stuck_nothing_is_said_to_be_stuck(
    caplog: pytest.LogCaptureFixture,
) -> None:
    results = Results()
    pool = HandlerThreads(2, results, eager=1, patience_s=0.0)
    release = threading.Event()
    started = await submit_blocking(pool, 3, release, until_started=2)
    pool.check()  # the third run waits at the cap, behind handlers that block
    assert pool.threads == 2 and pool.stuck == 0 and len(started) == 2
    assert not [r for r in caplog.records if getattr(r, "event", "") == "handler_threads_stuck"]
    release.set()
    await results.wait_for(3)
    pool.shutdown()


async def test_threads_behind_blocked_handlers_double_and_a_woken_thread_holds_off_more() -> None:
    results = Results()
    pool = HandlerThreads(100, results, eager=1, patience_s=WAIT_S)  # checks only by hand
    release = threading.Event()
    started: list[int] = []

    def blocks(n: int) -> None:
        started.append(n)
        release.wait(WAIT_S)

    async def until_started(count: int) -> None:
        async with asyncio.timeout(WAIT_S):
            while len(started) < count:  # noqa: ASYNC110 - a poll with a deadline
                await asyncio.sleep(0.01)

    def check() -> None:
        pool.check(now=time.monotonic() + WAIT_S)  # the queue looks stuck for WAIT_S

    pool.submit(ThreadRun(lambda n: n, "first", "first"))
    await results.wait_for(1)
    async with asyncio.timeout(WAIT_S):
        while not pool.parked:  # noqa: ASYNC110 - a poll with a deadline
            await asyncio.sleep(0.01)
    interval = sys.getswitchinterval()
    sys.setswitchinterval(WAIT_S)  # no thread takes the GIL from this one until it awaits
    try:
        for i in range(10):
            pool.submit(ThreadRun(blocks, i, i))
        check()  # the parked thread was woken but waits for the GIL: nobody else is woken
        assert pool.threads == 1 and not started
        for awake, after in [(1, 2), (2, 4), (4, 8), (8, 10)]:  # at most one per queued run
            await until_started(awake)
            check()
            assert pool.threads == after
        await until_started(10)
    finally:
        sys.setswitchinterval(interval)
        release.set()
    await results.wait_for(11)
    pool.shutdown()


async def test_call_returns_the_result_or_raises_what_the_handler_raised() -> None:
    pool = HandlerThreads(4, patience_s=WAIT_S)
    assert [await pool.call(lambda n: n * 2, i) for i in range(5)] == [0, 2, 4, 6, 8]
    with pytest.raises(SystemExit):
        await pool.call(sys.exit, 3)
    assert pool.threads == 1
    pool.shutdown()


async def test_a_call_cancelled_while_it_runs_leaves_its_thread_stuck_until_it_returns() -> None:
    pool = HandlerThreads(2, patience_s=0.01)
    release = threading.Event()
    started = threading.Event()

    def blocks(_: None) -> str:
        started.set()
        release.wait(WAIT_S)
        return "late"

    call = asyncio.ensure_future(pool.call(blocks, None))
    async with asyncio.timeout(WAIT_S):
        while not started.is_set():  # noqa: ASYNC110 - a poll with a deadline
            await asyncio.sleep(0.01)
    call.cancel()
    with pytest.raises(asyncio.CancelledError):
        await call
    assert pool.stuck == 1
    assert await pool.call(lambda n: n, "next") == "next", "a stuck thread takes no run"
    release.set()
    async with asyncio.timeout(WAIT_S):
        while pool.stuck:  # noqa: ASYNC110 - a poll with a deadline
            await asyncio.sleep(0.01)
    pool.shutdown()
