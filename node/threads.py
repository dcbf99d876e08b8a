"""The threads sync handlers run on: one standard ``ThreadPoolExecutor`` per node.

A run that times out or is cancelled leaves the executor's slots at once, but Python cannot
stop its thread, which stays busy ("stuck") until the handler returns. The pool has two
threads per execution slot, started on demand, so up to ``concurrency`` stuck threads
never delay a later run; beyond that, new runs wait in the pool's queue for a thread (and
time out there if none comes free), and a warning says so. A run cancelled while it waits
never starts. The threads are not daemons: ``node.cli`` exits without joining them.
Guarded by tests/unit/test_threads.py and tests/integration/test_stuck_handler.py.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, TypeVar

logger = logging.getLogger(__name__)

A = TypeVar("A")
R = TypeVar("R")

_pools = itertools.count(1)


class HandlerThreads:
    def __init__(self, concurrency: int) -> None:
        self._loop = asyncio.get_running_loop()
        self._concurrency = concurrency
        self.name = f"pulse-handler-{next(_pools)}"
        self._pool = ThreadPoolExecutor(2 * concurrency, thread_name_prefix=self.name)
        self._stuck = 0
        self._warned = False

    @property
    def stuck(self) -> int:
        """Threads still executing a call that was cancelled (timed out, lease lost)."""
        return self._stuck

    async def call(self, fn: Callable[[A], R], arg: A) -> R:
        """``fn(arg)`` on a pool thread; whatever it raises is raised here."""
        future = self._pool.submit(fn, arg)
        try:
            return await asyncio.wrap_future(future)
        except asyncio.CancelledError:
            if not future.cancel() and not future.done():
                self._stick(future)
            raise

    def _stick(self, future: Future[Any]) -> None:
        self._stuck += 1
        future.add_done_callback(self._came_free)
        if self._stuck > self._concurrency and not self._warned:
            self._warned = True
            logger.warning(
                "%d handler threads are stuck in runs that timed out; new runs wait for a "
                "thread to come free",
                self._stuck,
                extra={"event": "handler_threads_stuck"},
            )

    def _came_free(self, _: Future[Any]) -> None:
        # On the pool's thread; a closed loop means the node is exiting.
        with contextlib.suppress(RuntimeError):
            self._loop.call_soon_threadsafe(self._unstick)

    def _unstick(self) -> None:
        self._stuck -= 1
        if self._stuck <= self._concurrency:
            self._warned = False

    def shutdown(self) -> None:
        """Idle threads exit now, stuck ones when their handler returns; nothing waits."""
        self._pool.shutdown(wait=False, cancel_futures=True)
