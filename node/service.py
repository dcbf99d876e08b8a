"""The one loop every background service runs: ``run_once``, sleep, repeat.

Sleeps are interruptible (stop or wake events), end on the process's shared beat (so an
idle node wakes once for all its services), and back off on errors. Errors are logged
once when a service starts failing, then again only every minute and when it recovers,
so an outage never floods the log and never crashes the node.
"""

from __future__ import annotations

import asyncio
import logging
import math
import random
import time
from collections.abc import Awaitable, Callable

logger = logging.getLogger(__name__)

REPEAT_WARNING_S = 60.0


class Signal(asyncio.Event):
    """An ``asyncio.Event`` that ``wait_any`` waits on without a task of its own: waiting
    for any of several plain events takes a task per event, created and cancelled on every
    wait of every loop (tests/unit/test_service.py)."""

    def __init__(self) -> None:
        super().__init__()
        self._watchers: set[asyncio.Future[None]] = set()

    def set(self) -> None:
        if self.is_set():
            return  # its waiters were resolved when it was set (set once per run)
        super().set()
        for watcher in self._watchers:
            _resolve(watcher)


def _resolve(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


async def wait_any(timeout_s: float, *events: asyncio.Event) -> None:
    """Return when any event is set or after ``timeout_s``."""
    if timeout_s <= 0 or any(e.is_set() for e in events):
        return
    signals = [e for e in events if isinstance(e, Signal)]
    if len(signals) < len(events):  # plain events (tests pass them): a task each
        waiters = [asyncio.ensure_future(e.wait()) for e in events]
        try:
            await asyncio.wait(waiters, timeout=timeout_s, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for w in waiters:
                w.cancel()
        return
    loop = asyncio.get_running_loop()
    woken: asyncio.Future[None] = loop.create_future()
    timer = loop.call_later(timeout_s, _resolve, woken)
    for signal in signals:
        signal._watchers.add(woken)
    try:
        await woken
    finally:
        timer.cancel()
        for signal in signals:
            signal._watchers.discard(woken)


class Failures:
    """Logs a failing dependency once per state change (and a reminder every minute)."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.count = 0
        self._last_warning = 0.0

    def failed(self, exc: BaseException) -> None:
        self.count += 1
        now = time.monotonic()
        if self.count == 1 or now - self._last_warning >= REPEAT_WARNING_S:
            self._last_warning = now
            logger.warning(
                "%s failing (%d attempts so far): %s",
                self.name,
                self.count,
                exc,
                extra={"event": f"{self.name}_failing"},
            )

    def succeeded(self) -> None:
        if self.count:
            logger.info(
                "%s recovered after %d failed attempts",
                self.name,
                self.count,
                extra={"event": f"{self.name}_recovered"},
            )
        self.count = 0

    def backoff_s(self, base_s: float, cap_s: float = 10.0) -> float:
        delay: float = min(cap_s, base_s * 2.0 ** min(self.count, 8))
        return delay * random.uniform(0.5, 1.0)


# Where this process's beats fall: a random phase, so the nodes of a cluster do not all
# call Postgres and Redis in the same millisecond.
_PHASE_S = random.random() * 60.0


def until_beat(interval_s: float, now: float | None = None) -> float:
    """Seconds until this process's next beat of period ``interval_s``, at least a quarter
    period away. The periodic services (heartbeat, shard keeper, recovery, the claim poll)
    all wake on these beats rather than each on its own jittered timer, so an idle node
    wakes once a beat for all of them (tests/unit/test_service.py)."""
    if now is None:
        now = time.monotonic()
    at = _PHASE_S + (math.floor((now - _PHASE_S) / interval_s) + 1) * interval_s
    if at - now < interval_s / 4:
        at += interval_s
    return at - now


async def run_service(
    name: str,
    run_once: Callable[[], Awaitable[float | None]],
    *,
    interval_s: float,
    stop: asyncio.Event,
    wake: asyncio.Event | None = None,
    backoff_cap_s: float = 5.0,
) -> None:
    """Drive ``run_once`` until ``stop``, on this process's beat of ``interval_s`` (see
    ``until_beat``); it may return its own next delay in seconds instead."""
    failures = Failures(name)
    events = [stop] if wake is None else [stop, wake]
    while not stop.is_set():
        if wake is not None:
            wake.clear()
        try:
            wanted = await run_once()
            failures.succeeded()
            delay = until_beat(interval_s) if wanted is None else wanted
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            failures.failed(exc)
            delay = failures.backoff_s(min(interval_s, 0.5), backoff_cap_s)
        await wait_any(delay, *events)
