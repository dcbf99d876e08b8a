"""Resolving and invoking job handlers, and the context object they receive.

``package.module:function`` handlers may be sync (run on the node's handler threads, see
``node.threads``) or async (awaited); ``shell:<command>`` runs a subprocess in its own
process group, killed with the group on timeout. A handler that raises, times out, cannot
be imported or calls ``sys.exit`` produces an ``Outcome``; it never brings the node down
(tests/unit/test_executor.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import inspect
import json
import os
import signal
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, NamedTuple
from uuid import UUID

from node.threads import HandlerThreads

MAX_ERROR_CHARS = 2000


@dataclass(frozen=True)
class RunContext:
    """What a handler is told about the slot it runs."""

    job_id: UUID
    job_name: str
    tenant_id: str
    payload: dict[str, Any]
    scheduled_for: datetime
    attempt: int
    timeout_s: float
    node_id: str
    zone: str

    @property
    def idempotency_key(self) -> str:
        """``<job id>:<slot>``: the same for every attempt of a slot."""
        return f"{self.job_id}:{self.scheduled_for.isoformat()}"

    @property
    def deadline(self) -> datetime:
        """When the run times out, counted from its slot."""
        return self.scheduled_for + timedelta(seconds=self.timeout_s)


class Outcome(NamedTuple):
    """How a run ended."""

    status: str  # succeeded | failed | timed_out
    error: str | None
    duration_s: float


class HandlerError(Exception):
    """The handler reference cannot be resolved."""


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
    if ref.startswith("shell:"):
        return None
    try:
        fn = resolve(ref)
    except HandlerError:
        return None
    return None if inspect.iscoroutinefunction(fn) else fn


def _error_text(exc: BaseException) -> str:
    if isinstance(exc, SystemExit):
        return f"handler called sys.exit({exc.code!r})"
    text = "".join(traceback.format_exception_only(type(exc), exc)).strip()
    return text[-MAX_ERROR_CHARS:]


def outcome_of(error: BaseException | None, duration_s: float) -> Outcome:
    """The outcome of a handler call that returned (``error`` None) or raised."""
    if error is None:
        return Outcome("succeeded", None, duration_s)
    return Outcome("failed", _error_text(error), duration_s)


async def awaited(result: Any, left_s: float, timeout_s: float, started: float) -> Outcome:
    """Await what a sync handler returned, within ``left_s`` of its timeout (``started`` is
    the handler's start, in ``time.monotonic`` seconds)."""
    try:
        async with asyncio.timeout(max(0.0, left_s)):
            await result
    except TimeoutError:
        return Outcome("timed_out", f"timed out after {timeout_s:g}s", time.monotonic() - started)
    except (Exception, SystemExit, KeyboardInterrupt) as exc:  # a handler may raise anything
        return Outcome("failed", _error_text(exc), time.monotonic() - started)
    return Outcome("succeeded", None, time.monotonic() - started)


async def invoke(ref: str, ctx: RunContext, timeout_s: float, threads: HandlerThreads) -> Outcome:
    """Run the handler behind ``ref`` within ``timeout_s``, sync ones on ``threads`` (the
    executor runs sync handlers on a batched path of its own: ``node.executor``)."""
    started = time.monotonic()

    def done(status: str, error: str | None = None) -> Outcome:
        return Outcome(status, error, time.monotonic() - started)

    try:
        if ref.startswith("shell:"):
            return await _shell(ref[len("shell:") :], ctx, timeout_s, started)
        fn = resolve(ref)
        async with asyncio.timeout(timeout_s):
            if inspect.iscoroutinefunction(fn):
                await fn(ctx)
            else:
                result = await threads.call(fn, ctx)
                if inspect.isawaitable(result):
                    await result
        return done("succeeded")
    except TimeoutError:
        return done("timed_out", f"timed out after {timeout_s:g}s")
    except HandlerError as exc:
        return done("failed", str(exc))
    except asyncio.CancelledError:
        raise
    except (Exception, SystemExit, KeyboardInterrupt) as exc:  # a handler may raise anything
        return done("failed", _error_text(exc))


def _shell_env(ctx: RunContext) -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        {
            "PULSE_JOB_ID": str(ctx.job_id),
            "PULSE_JOB_NAME": ctx.job_name,
            "PULSE_TENANT_ID": ctx.tenant_id,
            "PULSE_PAYLOAD": json.dumps(ctx.payload, ensure_ascii=False),
            "PULSE_SCHEDULED_FOR": ctx.scheduled_for.isoformat(),
            "PULSE_ATTEMPT": str(ctx.attempt),
            "PULSE_IDEMPOTENCY_KEY": ctx.idempotency_key,
            "PULSE_DEADLINE": ctx.deadline.isoformat(),
            "PULSE_NODE_ID": ctx.node_id,
        }
    )
    return env


async def _shell(command: str, ctx: RunContext, timeout_s: float, started: float) -> Outcome:
    proc = await asyncio.create_subprocess_shell(
        command,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.PIPE,
        env=_shell_env(ctx),
        start_new_session=True,
    )
    try:
        async with asyncio.timeout(timeout_s):
            _, stderr = await proc.communicate()
    except (TimeoutError, asyncio.CancelledError) as exc:
        _kill_group(proc.pid)
        await proc.wait()
        if isinstance(exc, asyncio.CancelledError):
            raise
        return Outcome(
            "timed_out",
            f"timed out after {timeout_s:g}s; process group killed",
            time.monotonic() - started,
        )
    duration = time.monotonic() - started
    if proc.returncode == 0:
        return Outcome("succeeded", None, duration)
    tail = stderr.decode("utf-8", "replace").strip()[-MAX_ERROR_CHARS:]
    return Outcome(
        "failed", f"exit status {proc.returncode}" + (f": {tail}" if tail else ""), duration
    )


def _kill_group(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pid, signal.SIGKILL)
