"""Python handlers, ``package.module:function``: resolving the reference once per node, and
awaiting what a sync handler returned. Sync handlers run on the node's handler threads
(``node.handlers.threads``, driven by ``node.pipeline.executor``); async ones are awaited
by ``node.handlers.invoke``.
"""

from __future__ import annotations

import asyncio
import importlib
import inspect
import time
from collections.abc import Callable
from typing import Any

from cluster.jobs.handlerrefs import is_forwarded
from node.handlers.context import HandlerError, Outcome, RunContext, finished, timed_out

_resolved: dict[str, Callable[..., Any]] = {}


def resolve(ref: str) -> Callable[..., Any]:
    found = _resolved.get(ref)
    if found is not None:
        return found
    module_name, _, attr = ref.partition(":")
    try:
        module = importlib.import_module(module_name)
    except BaseException as exc:  # an import may raise anything, even SystemExit
        raise HandlerError(f"cannot import {module_name}: {type(exc).__name__}: {exc}") from exc
    fn: Callable[..., Any] | None = getattr(module, attr, None)
    if fn is None or not callable(fn):
        raise HandlerError(f"{module_name} has no callable {attr!r}")
    _resolved[ref] = fn
    return fn


def sync_handler(ref: str) -> Callable[..., Any] | None:
    """The function behind ``ref`` when it is a plain (sync) Python handler; None for
    async and ``shell:`` handlers and for references that do not resolve (``invoke``
    reports those)."""
    if ref.startswith("shell:") or is_forwarded(ref):
        return None
    try:
        fn = resolve(ref)
    except HandlerError:
        return None
    return None if inspect.iscoroutinefunction(fn) else fn


async def awaited(ctx: RunContext, result: Any, left_s: float, started: float) -> Outcome:
    """Await what a sync handler returned, within ``left_s`` of its timeout (``started`` is
    the handler's start, in ``time.monotonic`` seconds)."""
    try:
        async with asyncio.timeout(max(0.0, left_s)):
            value = await result
    except TimeoutError:
        return timed_out(ctx, ctx.timeout_s, time.monotonic() - started)
    except (Exception, SystemExit, KeyboardInterrupt) as exc:  # a handler may raise anything
        return finished(ctx, exc, time.monotonic() - started)
    return finished(ctx, None, time.monotonic() - started, value)
