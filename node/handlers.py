"""Resolving and invoking job handlers, and the context object they receive.

``package.module:function`` handlers may be sync (run on the node's handler threads, see
``node.threads``) or async (awaited); ``shell:<command>`` runs a subprocess in its own
process group, killed with the group on timeout. A cancelled run (``pulse runs cancel``,
overlap ``replace``) sets ``ctx.cancelled``; an async handler's task is cancelled and a
shell's process group gets SIGTERM, then SIGKILL after the job's cancel grace. A handler
that raises, times out, cannot be imported or calls ``sys.exit`` produces an ``Outcome``;
it never brings the node down (tests/unit/test_executor.py). The outcome carries what the
run produced (``node.output``): a shell command's stdout and stderr, read while it runs so
a full pipe never blocks it, or a Python handler's return value and ``ctx.log`` lines
(tests/unit/test_handler_output.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import inspect
import json
import os
import signal
import threading
import time
import traceback
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, NamedTuple
from uuid import UUID

from cluster.handlerspec import is_forwarded
from cluster.jobspec import DEFAULT_CANCEL_GRACE_S, DEFAULT_OUTPUT_LIMIT
from node.output import RunLog, TailBuffer, compose, storable
from node.threads import HandlerThreads

if TYPE_CHECKING:
    from node.effects import Effects, RunTransaction

MAX_ERROR_CHARS = 2000
CHUNK_BYTES = 65536
# After a timeout kills the process group, its pipes close; what they still hold is read
# for at most this long (a process that left the group may keep them open).
DRAIN_AFTER_KILL_S = 1.0


_CANCEL_LOCK = threading.Lock()  # a context's lazily made parts, made once


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
    output_limit: int = DEFAULT_OUTPUT_LIMIT
    # Increases with every claim of the job: stamp it on writes to other systems and refuse
    # writes that carry a lower one, so a run whose lease was taken over is fenced there too.
    fencing_token: int = 0
    cancel_grace_s: float = DEFAULT_CANCEL_GRACE_S
    effects: Effects | None = field(default=None, repr=False, compare=False)
    _log: RunLog = field(init=False, repr=False, compare=False)
    # Made on first use (few runs are ever cancelled; an Event costs a lock and a condition).
    _cancelled: threading.Event | None = field(default=None, init=False, repr=False, compare=False)
    # Set by the executor once the run's outcome is reported (node.effects reads it).
    _reported: bool = field(default=False, init=False, repr=False, compare=False)
    _transaction_used: bool = field(default=False, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_log", RunLog(self.output_limit))

    @property
    def cancelled(self) -> threading.Event:
        """Set when the run is asked to stop: a sync handler waits on it or checks it."""
        found = self._cancelled
        if found is None:
            with _CANCEL_LOCK:
                found = self._cancelled
                if found is None:
                    found = threading.Event()
                    object.__setattr__(self, "_cancelled", found)
        return found

    @property
    def reported(self) -> bool:
        return self._reported

    @property
    def is_cancelled(self) -> bool:
        return self._cancelled is not None and self._cancelled.is_set()

    def raise_if_cancelled(self) -> None:
        """Raise ``RunCancelled`` if the run was asked to stop; the run is then recorded
        ``cancelled`` (and not retried)."""
        if self.is_cancelled:
            raise RunCancelled("the run was cancelled")

    def transaction(self) -> RunTransaction:
        """``async with ctx.transaction() as conn`` (``with`` in a sync handler): a psycopg
        connection to Pulse's database in a transaction committed together with this run's
        fenced completion, and only if the run succeeds and still holds its lease; else
        rolled back. See docs/design/effects.md."""
        if self.effects is None:
            raise RuntimeError("ctx.transaction() needs a run started by a Pulse node")
        with _CANCEL_LOCK:
            if self._transaction_used:
                raise RuntimeError("ctx.transaction() may be used once per run")
            object.__setattr__(self, "_transaction_used", True)
        return self.effects.transaction(self)

    def log(self, message: str) -> None:
        """Add a line to the run's recorded output (``pulse runs show``); from any thread.
        The newest lines within the job's output limit are kept."""
        self._log.add(message)

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
    output: str | None = None  # JSON text of the run's output object (node.output.compose)


class RunCancelled(Exception):
    """Raised by ``ctx.raise_if_cancelled()`` in a run that was asked to stop."""


def cancelled(ctx: RunContext, by: str, duration_s: float, note: str = "") -> Outcome:
    return Outcome("cancelled", f"cancelled by {by}{note}", duration_s, _output(ctx))


class HandlerError(Exception):
    """The handler reference cannot be resolved."""


# Runs an http: or celery: handler (node.forwarding); passed in, so this module needs none.
Forward = Callable[[str, "RunContext", float], Awaitable[Outcome]]

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


def _error_text(exc: BaseException) -> str:
    if isinstance(exc, SystemExit):
        return f"handler called sys.exit({exc.code!r})"
    text = "".join(traceback.format_exception_only(type(exc), exc)).strip()
    return storable(text[-MAX_ERROR_CHARS:])[0]  # NUL or a lone surrogate would fail the write


def finished(
    ctx: RunContext, error: BaseException | None, duration_s: float, result: Any = None
) -> Outcome:
    """The outcome of a Python handler that returned ``result`` (``error`` None) or raised,
    with what it logged."""
    if error is None:
        return Outcome("succeeded", None, duration_s, _output(ctx, result))
    return Outcome("failed", _error_text(error), duration_s, _output(ctx))


def timed_out(ctx: RunContext, timeout_s: float, duration_s: float) -> Outcome:
    return Outcome("timed_out", f"timed out after {timeout_s:g}s", duration_s, _output(ctx))


def _output(ctx: RunContext, result: Any = None) -> str | None:
    return compose(result=result, log=ctx._log, limit=ctx.output_limit)


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


async def invoke(
    ref: str,
    ctx: RunContext,
    timeout_s: float,
    threads: HandlerThreads,
    forward: Forward | None = None,
) -> Outcome:
    """Run the handler behind ``ref`` within ``timeout_s``; sync ones on ``threads``,
    ``http:`` and ``celery:`` ones with ``forward``. The executor runs sync handlers on its
    own path (``node.executor``), the rest here."""
    started = time.monotonic()
    try:
        if is_forwarded(ref):
            if forward is None:
                raise HandlerError(f"{ref.partition(':')[0]}: handlers are not set up here")
            return await forward(ref, ctx, timeout_s)
        if ref.startswith("shell:"):
            return await _shell(ref[len("shell:") :], ctx, timeout_s, started)
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
        return Outcome("failed", str(exc), time.monotonic() - started, _output(ctx))
    except asyncio.CancelledError:
        raise
    except (Exception, SystemExit, KeyboardInterrupt) as exc:  # a handler may raise anything
        return finished(ctx, exc, time.monotonic() - started)


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
    limit = ctx.output_limit
    spawn = asyncio.ensure_future(
        asyncio.create_subprocess_shell(
            command,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE if limit > 0 else asyncio.subprocess.DEVNULL,
            stderr=asyncio.subprocess.PIPE,
            env=_shell_env(ctx),
            start_new_session=True,
        )
    )
    early: asyncio.CancelledError | None = None
    try:
        proc = await asyncio.shield(spawn)
    except asyncio.CancelledError as exc:
        # Cancelled while the process starts: asyncio cannot undo a half-made process
        # transport (its wait would never return, and the process group would live on),
        # so let it start and end it below as a run cancelled while it runs.
        proc, early = await spawn, exc
    stdout = TailBuffer(limit)
    stderr = TailBuffer(max(limit, 4 * MAX_ERROR_CHARS))  # the error message's tail too
    pumps = [asyncio.create_task(_pump(proc.stderr, stderr))]
    if proc.stdout is not None:
        pumps.append(asyncio.create_task(_pump(proc.stdout, stdout)))
    try:
        if early is not None:
            raise early
        async with asyncio.timeout(timeout_s):
            await asyncio.wait(pumps)  # unlike gather, a timeout here leaves them running
            await proc.wait()
    except (TimeoutError, asyncio.CancelledError) as exc:
        if ctx.is_cancelled:  # asked to stop: a chance to end cleanly first
            await _terminate_group(proc, ctx.cancel_grace_s)
        _kill_group(proc.pid)
        if isinstance(exc, TimeoutError) or ctx.is_cancelled:
            await asyncio.wait(pumps, timeout=DRAIN_AFTER_KILL_S)  # what it printed is kept
        for pump in pumps:
            pump.cancel()
        await proc.wait()
        if isinstance(exc, asyncio.CancelledError):
            task = asyncio.current_task()
            if not ctx.is_cancelled or task is None:
                raise
            task.uncancel()  # stopped as asked: the outcome says so
            return Outcome(
                "cancelled",
                "cancelled; process group terminated",
                time.monotonic() - started,
                compose(stdout=stdout, stderr=stderr, limit=limit),
            )
        return Outcome(
            "timed_out",
            f"timed out after {timeout_s:g}s; process group killed",
            time.monotonic() - started,
            compose(stdout=stdout, stderr=stderr, limit=limit),
        )
    duration = time.monotonic() - started
    output = compose(stdout=stdout, stderr=stderr, limit=limit)
    if proc.returncode == 0:
        return Outcome("succeeded", None, duration, output)
    tail = stderr.text(4 * MAX_ERROR_CHARS)[0] or ""
    tail = tail.strip()[-MAX_ERROR_CHARS:]
    return Outcome(
        "failed",
        f"exit status {proc.returncode}" + (f": {tail}" if tail else ""),
        duration,
        output,
    )


async def _pump(stream: asyncio.StreamReader | None, into: TailBuffer) -> None:
    """Read ``stream`` to its end into ``into``."""
    assert stream is not None
    while chunk := await stream.read(CHUNK_BYTES):
        into.write(chunk)


async def _terminate_group(proc: asyncio.subprocess.Process, grace_s: float) -> None:
    """SIGTERM the process group and wait up to ``grace_s`` for its leader to exit."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGTERM)
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(asyncio.shield(proc.wait()), grace_s)


def _kill_group(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pid, signal.SIGKILL)
