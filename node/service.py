"""The one loop every background service runs: ``run_once``, sleep, repeat.

Sleeps are interruptible (stop or wake events), jittered, and back off on errors. Errors
are logged once when a service starts failing, then again only every minute and when it
recovers, so an outage never floods the log and never crashes the node.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import Awaitable, Callable

logger = logging.getLogger(__name__)

REPEAT_WARNING_S = 60.0


async def wait_any(timeout_s: float, *events: asyncio.Event) -> None:
    """Return when any event is set or after ``timeout_s``."""
    if timeout_s <= 0 or any(e.is_set() for e in events):
        return
    waiters = [asyncio.ensure_future(e.wait()) for e in events]
    try:
        await asyncio.wait(waiters, timeout=timeout_s, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for w in waiters:
            w.cancel()


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


async def run_service(
    name: str,
    run_once: Callable[[], Awaitable[float | None]],
    *,
    interval_s: float,
    stop: asyncio.Event,
    wake: asyncio.Event | None = None,
    jitter: float = 0.1,
    backoff_cap_s: float = 5.0,
) -> None:
    """Drive ``run_once`` until ``stop``; it may return its own next delay in seconds."""
    failures = Failures(name)
    events = [stop] if wake is None else [stop, wake]
    while not stop.is_set():
        if wake is not None:
            wake.clear()
        try:
            wanted = await run_once()
            failures.succeeded()
            delay = (
                interval_s * random.uniform(1 - jitter, 1 + jitter) if wanted is None else wanted
            )
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            failures.failed(exc)
            delay = failures.backoff_s(min(interval_s, 0.5), backoff_cap_s)
        await wait_any(delay, *events)
