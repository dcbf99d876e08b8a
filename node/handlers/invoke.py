"""Invoking a handler of any kind within its timeout: ``shell:`` commands, ``http:`` and
``celery:`` references (passed to a ``Forward``), and Python functions. The executor runs
sync Python handlers on its own path (``node.pipeline.executor``), the rest here.
"""

from __future__ import annotations

import asyncio
import inspect
import time

from cluster.jobs.handlerrefs import is_forwarded
from node.handlers.context import (
    Forward,
    HandlerError,
    Outcome,
    RunContext,
    finished,
    output_of,
    timed_out,
)
from node.handlers.python import resolve
from node.handlers.shell import run_shell
from node.handlers.threads import HandlerThreads


async def invoke(
    ref: str,
    ctx: RunContext,
    timeout_s: float,
    threads: HandlerThreads,
    forward: Forward | None = None,
) -> Outcome:
    """Run the handler behind ``ref`` within ``timeout_s``; sync ones on ``threads``,
    ``http:`` and ``celery:`` ones with ``forward``. The executor runs sync handlers on its
    own path (``node.pipeline.executor``), the rest here."""
    started = time.monotonic()
    try:
        if is_forwarded(ref):
            if forward is None:
                raise HandlerError(f"{ref.partition(':')[0]}: handlers are not set up here")
            return await forward(ref, ctx, timeout_s)
        if ref.startswith("shell:"):
            return await run_shell(ref, ctx, timeout_s, started)
        fn = resolve(ref)
        async with asyncio.timeout(timeout_s):
            if inspect.iscoroutinefunction(fn):
                result = await fn(ctx)
            else:
                result = await threads.call(fn, ctx)
                if inspect.isawaitable(result):
                    result = await result
        return finished(ctx, None, time.monotonic() - started, result)
    except TimeoutError:
        return timed_out(ctx, timeout_s, time.monotonic() - started)
    except HandlerError as exc:
        return Outcome("failed", str(exc), time.monotonic() - started, output_of(ctx))
    except asyncio.CancelledError:
        raise
    except (Exception, SystemExit, KeyboardInterrupt) as exc:  # a handler may raise anything
        return finished(ctx, exc, time.monotonic() - started)
