"""The worker threads that run sync handlers, and the way their results reach the loop.

``asyncio.to_thread`` per run costs a future pair, a context copy and a wake-up of the
event loop for every single run: about 100 µs of CPU per call on a 2-core machine,
10x the cost of a short handler. Here a run is one item on a queue; the worker appends
its result to a list and wakes the loop only when that list was empty, so a tick that
ends 300 runs wakes the loop a handful of times, not 300.

Threads start on demand: a queued run takes an idle thread or starts a new one, so there
are never more threads than the executor's concurrency, plus one for every run that timed
out and is still stuck in its thread (Python cannot stop a thread, and a stuck handler
must not hold up later runs). Threads are daemons: a stuck handler never holds up the
node's exit.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from queue import SimpleQueue
from typing import Any


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
    def __init__(self, on_results: Callable[[list[ThreadRun]], None]) -> None:
        self._loop = asyncio.get_running_loop()
        self._on_results = on_results
        self._queue: SimpleQueue[ThreadRun | None] = SimpleQueue()
        self._lock = threading.Lock()
        self._results: list[ThreadRun] = []
        self._threads = 0
        self._idle = 0
        self._stuck = 0  # abandoned runs still executing in their thread
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
            # that two runs never count on the same one, or a new one. A run therefore
            # never waits behind a busy handler. The executor has at most ``concurrency`` runs
            # in flight, so there are never more threads than that plus the stuck ones.
            spawn = self._idle == 0
            if spawn:
                self._threads += 1
            else:
                self._idle -= 1
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
                    self._idle += 1
                    continue
                run.started = time.monotonic()
            try:
                run.result = run.fn(run.arg)
            except BaseException as exc:  # a handler may raise anything, even SystemExit
                run.error = exc
            run.duration_s = time.monotonic() - run.started
            with self._lock:
                run._done = True
                self._idle += 1  # before the loop hears of the result and submits more
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
