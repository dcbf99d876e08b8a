"""The threads sync handlers run on, and the way their results reach the event loop.

Custom, not a ``ThreadPoolExecutor``: a burst of short runs is taken one after another by
one thread and their results collected in batches, where a thread woken per run made a
burst drain twice as slow (docs/design/handler-threads.md). More threads take runs while
queued runs wait behind handlers that block. Up to ``limit`` threads stuck in runs that
timed out never take a thread from later runs; beyond that runs wait, with a warning.
Threads are daemons: they never hold up the node's exit. Guarded by
tests/unit/test_threads.py and tests/integration/test_stuck_handler.py.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

logger = logging.getLogger(__name__)

EAGER_THREADS = 1  # threads woken for queued runs before a patience check adds more
PATIENCE_S = 0.002  # how long queued runs may wait, taken by nobody, before more threads help
CAPPED_CHECK_S = 0.1  # at the cap only a stuck thread coming free helps: look seldom


@dataclass(eq=False)
class ThreadRun:
    """One sync handler call. ``error`` is set when it raised (``SystemExit`` included)."""

    fn: Callable[[Any], Any]
    arg: Any
    key: Any = None
    result: Any = None
    error: BaseException | None = None
    queued: float = 0.0
    started: float = 0.0
    duration_s: float = 0.0
    abandoned: bool = False  # timed out or cancelled: its result is not wanted
    future: asyncio.Future[None] | None = None  # resolved when the result reaches the loop
    _done: bool = field(default=False, repr=False)


class HandlerThreads:
    def __init__(
        self,
        limit: int,
        on_results: Callable[[list[ThreadRun]], None] | None = None,
        *,
        eager: int = EAGER_THREADS,
        patience_s: float = PATIENCE_S,
    ) -> None:
        self._loop = asyncio.get_running_loop()
        self._limit = limit
        self._eager = eager
        self._patience_s = patience_s
        self._on_results = on_results
        self._lock = threading.Lock()
        self._queue: deque[ThreadRun] = deque()
        self._parked: list[threading.Lock] = []  # an idle thread waits to acquire its lock
        self._results: list[ThreadRun] = []
        self._delivering = False  # the loop is told to collect the results
        self._threads = 0
        self._awake = 0  # threads not parked: running a run, or woken to take one
        self._pending = 0  # woken threads that have not reached the queue yet
        self._stuck = 0  # abandoned runs still executing in their thread
        self._last_taken = 0.0  # monotonic time a thread last took a run
        self._checking = False  # a patience check is scheduled on the loop
        self._capped = False
        self._closed = False

    @property
    def threads(self) -> int:
        return self._threads

    @property
    def parked(self) -> int:
        """Threads waiting for runs."""
        return len(self._parked)

    @property
    def stuck(self) -> int:
        """Threads still executing a run that timed out or was cancelled."""
        return self._stuck

    def submit(self, run: ThreadRun) -> None:
        with self._lock:
            if self._closed:
                raise RuntimeError("handler threads are shut down")
            run.queued = time.monotonic()
            self._queue.append(run)
            if self._awake - self._stuck < self._eager:
                self._wake()  # at the cap, the check below says so if the run waits
            check = not self._checking
            self._checking = True
        if check:
            self._loop.call_later(self._patience_s, self.check)

    async def call(self, fn: Callable[[Any], Any], arg: Any) -> Any:
        """``fn(arg)`` on a handler thread; what it raises is raised here. Cancelled, the
        run is abandoned (``abandon``)."""
        future: asyncio.Future[None] = self._loop.create_future()
        run = ThreadRun(fn, arg, future=future)
        self.submit(run)
        try:
            await future
        except asyncio.CancelledError:
            self.abandon(run)
            raise
        if run.error is not None:
            raise run.error
        return run.result

    def abandon(self, run: ThreadRun) -> None:
        """Its result is no longer wanted (timeout, cancel). If it is executing now, its
        thread is stuck with it: the next run gets another thread meanwhile."""
        with self._lock:
            if run.abandoned:
                return
            run.abandoned = True
            if run.started and not run._done:
                self._stuck += 1

    def _wake(self) -> bool:
        """Wake a parked thread or start one (under the lock); False at the cap."""
        if self._parked:
            self._parked.pop().release()
        elif self._threads < self._limit + min(self._stuck, self._limit):
            self._threads += 1
            threading.Thread(target=self._work, name="pulse-handler", daemon=True).start()
        else:
            return False
        self._awake += 1
        self._pending += 1
        return True

    def check(self, now: float | None = None) -> None:
        """On the loop, ``patience_s`` after a submit and again while runs are queued:
        collect finished runs, and if queued runs are not being taken (the awake threads
        are busy in handlers that block), double the threads taking them. A thread woken
        but not at the queue yet waits for the GIL, not in a handler: none is added then."""
        capped = False
        with self._lock:
            if any(r.abandoned for r in self._queue):  # timed out while queued
                self._queue = deque(r for r in self._queue if not r.abandoned)
            collect = self._take_delivery()
            checking = self._checking = not self._closed and bool(self._queue)
            if checking and not self._pending:
                now = time.monotonic() if now is None else now
                waited = now - max(self._queue[0].queued, self._last_taken)
                if waited >= self._patience_s:
                    more = min(len(self._queue), max(1, self._awake - self._stuck))
                    for _ in range(more):
                        if not self._wake():
                            capped = True
                            break
        if collect:
            self._deliver()
        if not checking:
            return
        if capped:
            self._warn_capped()
        self._loop.call_later(CAPPED_CHECK_S if capped else self._patience_s, self.check)

    def _warn_capped(self) -> None:
        with self._lock:
            # With none stuck, every thread at the cap is awake and takes a queued run as
            # soon as it gets the GIL: nothing to warn about.
            if self._capped or not self._stuck:
                return
            self._capped = True
            stuck = self._stuck
        logger.warning(
            "%d handler threads are stuck in runs that timed out; new runs wait for a "
            "thread to come free",
            stuck,
            extra={"event": "handler_threads_stuck"},
        )

    def _work(self) -> None:
        parker = threading.Lock()
        parker.acquire()
        woken = True  # started or woken by _wake(): counted in _pending
        while True:
            with self._lock:
                if woken:
                    self._pending -= 1
                    woken = False
                if self._closed:
                    self._threads -= 1
                    self._awake -= 1
                    return
                run = self._queue.popleft() if self._queue else None
                if run is None:
                    self._awake -= 1
                    self._parked.append(parker)
                    self._capped = False
                    # Finished runs left for a patience check that no longer comes.
                    wake = self._take_delivery()
                else:
                    self._last_taken = time.monotonic()
                    if run.abandoned:  # cancelled before it started
                        continue
                    run.started = self._last_taken
            if run is None:
                if wake and not self._tell_loop():
                    return
                parker.acquire()  # until _wake() or shutdown() releases it
                woken = True
                continue
            try:
                run.result = run.fn(run.arg)
            except BaseException as exc:  # a handler may raise anything, even SystemExit
                run.error = exc
            run.duration_s = time.monotonic() - run.started
            with self._lock:
                run._done = True
                if run.abandoned:
                    self._stuck -= 1
                    continue
                self._results.append(run)
                # While runs are queued, the patience check collects this result.
                wake = not self._queue and self._take_delivery()
            if wake and not self._tell_loop():
                return

    def _take_delivery(self) -> bool:
        """Under the lock: True if finished runs wait and nobody has been told to collect
        them yet; the caller now has to."""
        if not self._results or self._delivering:
            return False
        self._delivering = True
        return True

    def _tell_loop(self) -> bool:
        """Have the loop collect the finished runs; False when the loop is closed (the
        node is exiting)."""
        try:
            self._loop.call_soon_threadsafe(self._deliver)
        except RuntimeError:
            return False
        return True

    def _deliver(self) -> None:
        with self._lock:
            batch, self._results = self._results, []
            self._delivering = False
        wanted = []
        for run in batch:
            if run.abandoned:
                continue
            if run.future is None:
                wanted.append(run)
            elif not run.future.done():
                run.future.set_result(None)
        if wanted and self._on_results is not None:
            self._on_results(wanted)

    def shutdown(self) -> None:
        """Parked workers exit now; busy ones after their run (daemons: never waited for)."""
        with self._lock:
            self._closed = True
            parked, self._parked = self._parked, []
            self._awake += len(parked)
            self._pending += len(parked)
        for parker in parked:
            parker.release()
