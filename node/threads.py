"""The worker threads that run sync handlers, and the way their results reach the loop.

``asyncio.to_thread`` per run costs a future pair, a context copy and a wake-up of the
event loop for every single run: about 100 µs of CPU per call on a 2-core machine,
10x the cost of a short handler. Here a run is one item on a queue; the worker appends
its result to a list and wakes the loop only when that list was empty, so a tick that
ends 300 runs wakes the loop a handful of times, not 300.

Threads start on demand: a queued run takes an idle thread or starts a new one. A run
that timed out but is still stuck in its thread (Python cannot stop a thread) keeps that
thread, and later runs get threads of their own, up to ``limit`` stuck ones: beyond that a
handler that hangs every time would grow threads without end, so new runs then wait for
a thread to come free (and time out if none does), and a warning says so. Threads are
daemons: a stuck handler never holds up the node's exit.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from queue import SimpleQueue
from typing import Any

logger = logging.getLogger(__name__)


@dataclass(eq=False)
class ThreadRun:
    """One sync handler call. ``error`` is set when it raised (``SystemExit`` included)."""

    fn: Callable[[Any], Any]
    arg: Any
    key: Any
    result: Any = None
    error: BaseException | None = None
    started: float = 0.0
    duration_s: float = 0.0
    abandoned: bool = False  # timed out or cancelled: its result is not wanted
    _done: bool = field(default=False, repr=False)


class HandlerThreads:
    def __init__(self, limit: int, on_results: Callable[[list[ThreadRun]], None]) -> None:
        self._loop = asyncio.get_running_loop()
        self._limit = limit
        self._on_results = on_results
        self._queue: SimpleQueue[ThreadRun | None] = SimpleQueue()
        self._lock = threading.Lock()
        self._results: list[ThreadRun] = []
        self._threads = 0
        self._idle = 0
        self._stuck = 0  # abandoned runs still executing in their thread
        self._owed = 0  # queued runs that no thread was reserved for (the cap was reached)
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
            # Every queued run is owed a thread of its own: an idle one, reserved here so
            # that two runs never count on the same one, or a new one. The executor has at
            # most ``limit`` runs in flight, so a run waits behind a busy handler only when
            # ``limit`` more threads are stuck in runs that timed out.
            spawn = warn = False
            if self._idle > 0:
                self._idle -= 1
            elif self._threads < self._limit + min(self._stuck, self._limit):
                spawn = True
                self._threads += 1
            else:
                self._owed += 1
                warn, self._capped = not self._capped, True
        if warn:
            logger.warning(
                "%d handler threads are stuck in runs that timed out; new runs wait for a "
                "thread to come free",
                self._stuck,
                extra={"event": "handler_threads_stuck"},
            )
        self._queue.put(run)
        if spawn:
            threading.Thread(target=self._work, name="pulse-handler", daemon=True).start()

    def abandon(self, run: ThreadRun) -> None:
        """Its result is no longer wanted (timeout, cancel). If it is executing now, its
        thread is stuck with it: the next run gets another thread meanwhile."""
        with self._lock:
            if run.abandoned:
                return
            run.abandoned = True
            if run.started and not run._done:
                self._stuck += 1

    def _work(self) -> None:
        queue = self._queue
        while True:
            run = queue.get()
            if run is None:  # shutdown
                with self._lock:
                    self._threads -= 1
                return
            with self._lock:
                if run.abandoned:  # cancelled before it started
                    self._free()
                    continue
                run.started = time.monotonic()
            try:
                run.result = run.fn(run.arg)
            except BaseException as exc:  # a handler may raise anything, even SystemExit
                run.error = exc
            run.duration_s = time.monotonic() - run.started
            with self._lock:
                run._done = True
                self._free()  # before the loop hears of the result and submits more
                if run.abandoned:
                    self._stuck -= 1
                    continue
                self._results.append(run)
                wake = len(self._results) == 1
            if wake:
                try:
                    self._loop.call_soon_threadsafe(self._deliver)
                except RuntimeError:  # the loop is closed: the node is exiting
                    return

    def _free(self) -> None:
        """This thread takes its next run from the queue (called under the lock)."""
        if self._owed:
            self._owed -= 1  # a queued run waits for a thread: this one
        else:
            self._idle += 1
            self._capped = False

    def _deliver(self) -> None:
        with self._lock:
            batch, self._results = self._results, []
        self._on_results([r for r in batch if not r.abandoned])

    def shutdown(self) -> None:
        """Idle workers exit; busy ones exit after their run (daemons: never waited for)."""
        with self._lock:
            self._closed = True
            count = self._threads
        for _ in range(count):
            self._queue.put(None)
