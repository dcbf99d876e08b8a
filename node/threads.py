"""The worker threads that run sync handlers, and the way their results reach the loop.

``asyncio.to_thread`` per run costs a future pair, a context copy and a wake-up of the
event loop for every single run: about 100 µs of CPU per call on a 2-core machine,
10x the cost of a short handler. Here a run is one item on a queue; the worker appends
its result to a list, and the loop collects the list when a worker finds the queue empty
(it wakes the loop then) or at its next patience check (below) while runs are still
queued. Waking the loop as soon as a result is ready made the loop and the worker trade
the GIL once per run, a context switch each: a tenth of a busy node's CPU.

Waking a thread per run is the other cost. A hundred runs due at the same instant on a
hundred threads make a hundred threads ask for the GIL at once, and a short handler that
writes a file or a socket hands the GIL over at each write: the benchmark's witness cost
twice its own CPU that way; even two threads trade the GIL at every such write. So only
``EAGER_THREADS`` (one) thread is woken for queued runs; it takes run after run while the
queue lasts. Handlers that block are why a run may need a thread of its own: when the
oldest queued run has waited ``PATIENCE_S`` with no thread taking any run meanwhile, and
every awake thread is inside a handler, the check doubles the threads taking runs (one
more per awake thread, at most one per queued run), and again at each later check that
finds the queue stuck. A thread that was woken but has not reached the queue yet is
waiting for the GIL, not blocked: while one is, nobody else is woken. Without that, a
loop holding the GIL for a few milliseconds (a claim of a hundred rows) made every check
wake a thread per queued run: a hundred threads per node in the benchmark's steady run.
Behind handlers that block, a run thus starts at most a few ``PATIENCE_S`` late (about
``PATIENCE_S`` times log2 of the queue), and a burst of short runs costs one thread's
wake-up instead of one per run.

Threads start on demand and park when the queue is empty. A run that timed out but is
still stuck in its thread (Python cannot stop a thread) keeps that thread, and later runs
get threads of their own, up to ``limit`` stuck ones: beyond that a handler that hangs
every time would grow threads without end, so new runs then wait for a thread to come
free (and time out if none does), and a warning says so. Threads are daemons: a stuck
handler never holds up the node's exit.
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

EAGER_THREADS = 1
PATIENCE_S = 0.002
CAPPED_CHECK_S = 0.1


@dataclass(eq=False)
class ThreadRun:
    """One sync handler call. ``error`` is set when it raised (``SystemExit`` included)."""

    fn: Callable[[Any], Any]
    arg: Any
    key: Any
    result: Any = None
    error: BaseException | None = None
    queued: float = 0.0
    started: float = 0.0
    duration_s: float = 0.0
    abandoned: bool = False  # timed out or cancelled: its result is not wanted
    _done: bool = field(default=False, repr=False)


class HandlerThreads:
    def __init__(
        self,
        limit: int,
        on_results: Callable[[list[ThreadRun]], None],
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
            self._loop.call_later(self._patience_s, self._check)

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

    def _check(self, now: float | None = None) -> None:
        """On the loop, ``patience_s`` after a submit and again while runs are queued:
        collect finished runs, and if queued runs are not being taken (the awake threads
        are busy in handlers that block), double the threads taking them."""
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
        # At the cap only a stuck thread coming free helps, and it takes queued runs
        # itself: look again, but seldom.
        self._loop.call_later(CAPPED_CHECK_S if capped else self._patience_s, self._check)

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
        self._on_results([r for r in batch if not r.abandoned])

    def shutdown(self) -> None:
        """Parked workers exit now; busy ones after their run (daemons: never waited for)."""
        with self._lock:
            self._closed = True
            parked, self._parked = self._parked, []
            self._awake += len(parked)
            self._pending += len(parked)
        for parker in parked:
            parker.release()
