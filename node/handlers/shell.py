"""Shell handlers (``cluster.jobs.shellrefs``): ``shell:<command>`` run by ``/bin/sh -c``,
the argv form run with exec and no shell. A subprocess in its own process group, with a
minimal environment (``PATH``, ``HOME``, the locale, the run's identity in ``PULSE_*``
variables and the variables its ``env`` list names: never the node's database or Redis
URL; ``PULSE_METRICS_FILE`` names where it may report metrics, ``node.handlers.metricsfile``),
its stdout and stderr read while it runs (so a full pipe never blocks it), killed
with its group on timeout. A cancelled run's group gets SIGTERM, then SIGKILL after the
job's cancel grace.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import time
from collections.abc import Awaitable
from typing import Any

from cluster.errors import InvalidInput
from cluster.jobs import shellrefs
from cluster.jobs.shellrefs import RESERVED_PREFIX, ShellCommand
from node.handlers import metricsfile
from node.handlers.context import MAX_ERROR_CHARS, HandlerError, Outcome, RunContext
from node.handlers.output import TailBuffer, compose

CHUNK_BYTES = 65536
# After a timeout kills the process group, its pipes close; what they still hold is read
# for at most this long (a process that left the group may keep them open).
DRAIN_AFTER_KILL_S = 1.0
# Taken from the node's environment when set; everything else only when the job names it.
BASICS = ("HOME", "LANG", "LC_ALL", "TZ")


def _shell_env(ctx: RunContext, names: tuple[str, ...], metrics: str) -> dict[str, str]:
    """What the process sees: the basics, the variables the job names, the run's own."""
    env = {"PATH": os.environ.get("PATH", os.defpath)}
    for name in (*BASICS, *names):
        if name in os.environ and not name.startswith(RESERVED_PREFIX):
            env[name] = os.environ[name]
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
            "PULSE_METRICS_FILE": metrics,
        }
    )
    if ctx.traceparent is not None:  # the attempt's span (--otel), the W3C way
        env["TRACEPARENT"] = ctx.traceparent
    return env


def _spawn(
    found: ShellCommand, ctx: RunContext, metrics: str
) -> Awaitable[asyncio.subprocess.Process]:
    options: dict[str, Any] = {
        "stdin": asyncio.subprocess.DEVNULL,
        "stdout": asyncio.subprocess.PIPE if ctx.output_limit > 0 else asyncio.subprocess.DEVNULL,
        "stderr": asyncio.subprocess.PIPE,
        "env": _shell_env(ctx, found.env, metrics),
        "start_new_session": True,
    }
    if found.argv is not None:
        return asyncio.create_subprocess_exec(*found.argv, **options)
    assert found.command is not None
    return asyncio.create_subprocess_shell(found.command, **options)


async def run_shell(ref: str, ctx: RunContext, timeout_s: float, started: float) -> Outcome:
    """Run the ``shell:`` reference ``ref`` for ``ctx`` within ``timeout_s``."""
    limit = ctx.output_limit
    try:
        found = shellrefs.parse(ref)
    except InvalidInput as exc:
        raise HandlerError(f"bad shell handler: {exc.problem}") from exc
    metrics_path = metricsfile.new_path()
    spawn = asyncio.ensure_future(_spawn(found, ctx, metrics_path))
    early: asyncio.CancelledError | None = None
    try:
        proc = await asyncio.shield(spawn)
    except OSError as exc:  # exec of a program that is not there, or not executable
        program = found.argv[0] if found.argv else "/bin/sh"
        error = f"cannot run {program!r}: {exc.strerror or exc}"
        return Outcome("failed", error, time.monotonic() - started, None)
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
        await proc.wait()
        # What it printed is kept, and pipes read to their end close: a pump cancelled
        # before the end would leave its pipe open, paused behind a full buffer.
        await asyncio.wait(pumps, timeout=DRAIN_AFTER_KILL_S)
        for pump in pumps:
            pump.cancel()
        metrics = metricsfile.take(metrics_path)
        if isinstance(exc, asyncio.CancelledError):
            task = asyncio.current_task()
            if not ctx.is_cancelled or task is None:
                raise
            task.uncancel()  # stopped as asked: the outcome says so
            return Outcome(
                "cancelled",
                "cancelled; process group terminated",
                time.monotonic() - started,
                compose(stdout=stdout, stderr=stderr, metrics=metrics, limit=limit),
            )
        return Outcome(
            "timed_out",
            f"timed out after {timeout_s:g}s; process group killed",
            time.monotonic() - started,
            compose(stdout=stdout, stderr=stderr, metrics=metrics, limit=limit),
        )
    duration = time.monotonic() - started
    metrics = metricsfile.take(metrics_path)
    output = compose(stdout=stdout, stderr=stderr, metrics=metrics, limit=limit)
    if proc.returncode == 0:
        return Outcome("succeeded", None, duration, output, None, metrics)
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
