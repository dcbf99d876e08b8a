"""Handlers of the steerable-runs end-to-end tests (imported by node processes).

Each writes ``<dir>/<job>.started`` when it begins so a test can wait for it; the ``effects``
ones insert one row per run into a user table through ``ctx.transaction()``.
"""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path

from psycopg import sql

from node.handlers.context import RunContext


def _started(ctx: RunContext) -> None:
    path = Path(ctx.payload["dir"]) / f"{ctx.job_name}.started"
    with path.open("a") as out:
        out.write(f"{ctx.node_id} {ctx.scheduled_for.isoformat()}\n")


async def sleeps(ctx: RunContext) -> None:
    _started(ctx)
    await asyncio.sleep(600)


async def sleeps_noting_stop(ctx: RunContext) -> None:
    """As ``sleeps``, and writes ``<dir>/<job>.stopped`` (node, slot) when it is stopped."""
    _started(ctx)
    try:
        await asyncio.sleep(600)
    finally:
        with (Path(ctx.payload["dir"]) / f"{ctx.job_name}.stopped").open("a") as out:
            out.write(f"{ctx.node_id} {ctx.scheduled_for.isoformat()}\n")


def ignores(ctx: RunContext) -> None:
    """Blocks for ``sleep_s`` whatever is asked of it (Python cannot stop a thread)."""
    _started(ctx)
    time.sleep(ctx.payload["sleep_s"])


def polls(ctx: RunContext) -> None:
    _started(ctx)
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline:
        ctx.raise_if_cancelled()
        ctx.cancelled.wait(0.05)


def _insert(ctx: RunContext) -> sql.Composed:
    return sql.SQL("INSERT INTO public.{} (job, slot, token, node) VALUES (%s, %s, %s, %s)").format(
        sql.Identifier(ctx.payload["table"])
    )


async def effects_async(ctx: RunContext) -> None:
    async with ctx.transaction() as conn:
        params = (ctx.job_name, ctx.scheduled_for, ctx.fencing_token, ctx.node_id)
        await conn.execute(_insert(ctx), params)
        await asyncio.sleep(ctx.payload.get("hold_s", 0.2))  # a window for faults to hit


def effects_sync(ctx: RunContext) -> None:
    with ctx.transaction() as conn:
        params = (ctx.job_name, ctx.scheduled_for, ctx.fencing_token, ctx.node_id)
        conn.execute(_insert(ctx), params)
        time.sleep(ctx.payload.get("hold_s", 0.2))


async def overlaps(ctx: RunContext) -> None:
    """Record when this attempt ran (wall clock, one JSON line at each end)."""
    path = Path(ctx.payload["dir"]) / f"{ctx.job_name}.jsonl"
    slot, attempt = ctx.scheduled_for.isoformat(), ctx.attempt
    with path.open("a") as out:
        out.write(
            json.dumps({"slot": slot, "attempt": attempt, "at": time.time(), "end": 0}) + "\n"
        )
    await asyncio.sleep(ctx.payload["hold_s"])
    with path.open("a") as out:
        out.write(
            json.dumps({"slot": slot, "attempt": attempt, "at": time.time(), "end": 1}) + "\n"
        )
