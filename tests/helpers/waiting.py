"""Waiting for what a test is not told about: ``until`` polls a predicate with a deadline.

Tests synchronise on observable state, never on sleeps. ``until(probe, what, timeout_s)``
calls ``probe`` (a function, or one that returns an awaitable) until it returns something
truthy, and returns that; at the deadline it fails naming what it waited for and the last
value it saw. Where an event loop runs (an async test) it must be awaited, and it sleeps on
that loop, so the code under test keeps running; elsewhere it blocks. Async code that
forgets the ``await`` is caught by ``tests/test_suite.py``.
"""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

T = TypeVar("T")
BLOCKING_INTERVAL_S = 0.2  # probes of other processes often read the whole cluster status
LOOP_INTERVAL_S = 0.02
LAST_MAX_CHARS = 500


def until(
    probe: Callable[[], Any],
    what: str,
    timeout_s: float = 10.0,
    *,
    interval_s: float | None = None,
) -> Any:
    """``probe``'s first truthy answer, polled every ``interval_s`` for at most
    ``timeout_s``; an ``AssertionError`` saying ``what`` was awaited at the deadline.
    Returns a coroutine to await when called where an event loop runs."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        on_loop = False  # not blocking in here: a failure would show this error as its cause
    else:
        on_loop = True
    if on_loop:
        return _on_loop(probe, what, timeout_s, interval_s or LOOP_INTERVAL_S)
    return _blocking(probe, what, timeout_s, interval_s or BLOCKING_INTERVAL_S)


def _blocking(probe: Callable[[], T], what: str, timeout_s: float, interval_s: float) -> T:
    deadline = time.monotonic() + timeout_s
    while True:
        last = probe()
        if inspect.isawaitable(last):
            raise TypeError(f"an async probe for {what} needs an event loop: await until()")
        if last:
            return last
        if time.monotonic() >= deadline:
            raise _timed_out(what, timeout_s, last)
        time.sleep(interval_s)


async def _on_loop(
    probe: Callable[[], T | Awaitable[T]], what: str, timeout_s: float, interval_s: float
) -> T:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while True:
        found = probe()
        last: T = await found if inspect.isawaitable(found) else found  # type: ignore[assignment]
        if last:
            return last
        if loop.time() >= deadline:
            raise _timed_out(what, timeout_s, last)
        await asyncio.sleep(interval_s)


def _timed_out(what: str, timeout_s: float, last: object) -> AssertionError:
    seen = repr(last)
    if len(seen) > LAST_MAX_CHARS:
        seen = seen[:LAST_MAX_CHARS] + "..."
    return AssertionError(f"timed out after {timeout_s}s waiting for {what} (last: {seen})")
