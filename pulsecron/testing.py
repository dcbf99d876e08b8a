"""Helpers to unit-test job handlers without a database: ``context`` builds the
``RunContext`` a node would pass, ``run`` calls a sync or async handler with it.

    from pulsecron import testing

    def test_rollup() -> None:
        assert testing.run(billing_rollup, payload={"tenant": "acme"}) == {"rows": 3}
"""

from __future__ import annotations

import asyncio
import inspect
import uuid
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Any

from cluster.jobs.fields import DEFAULT_OUTPUT_LIMIT, DEFAULT_TENANT, DEFAULT_TIMEOUT_S
from node.handlers.context import RunContext

__all__ = ["arun", "context", "run"]


def context(
    payload: Mapping[str, Any] | None = None,
    *,
    scheduled_for: datetime | None = None,
    attempt: int = 1,
    job_name: str = "test-job",
    tenant_id: str = DEFAULT_TENANT,
    job_id: uuid.UUID | None = None,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    node_id: str = "test-node",
    zone: str = "default",
    output_limit: int = DEFAULT_OUTPUT_LIMIT,
    previous_slot: datetime | None = None,
    last_success_slot: datetime | None = None,
    state: Mapping[str, Any] | None = None,
    traceparent: str | None = None,
    schedule_entry: int | None = None,
) -> RunContext:
    """A ``RunContext`` as a node builds it; ``scheduled_for`` defaults to now (UTC) and
    must be timezone-aware, ``attempt`` is 1-based."""
    when = scheduled_for or datetime.now(UTC)
    if when.tzinfo is None:
        raise ValueError("scheduled_for must be timezone-aware (e.g. datetime.now(UTC))")
    if attempt < 1:
        raise ValueError("attempt is 1-based")
    return RunContext(
        job_id=job_id or uuid.uuid5(uuid.NAMESPACE_URL, f"pulse:{tenant_id}/{job_name}"),
        job_name=job_name,
        tenant_id=tenant_id,
        payload=dict(payload or {}),
        scheduled_for=when,
        attempt=attempt,
        timeout_s=timeout_s,
        node_id=node_id,
        zone=zone,
        output_limit=output_limit,
        previous_slot=previous_slot,
        last_success_slot=last_success_slot,
        state=dict(state or {}),
        traceparent=traceparent,
        schedule_entry=schedule_entry,
    )


def run(
    handler: Callable[[RunContext], Any], ctx: RunContext | None = None, **context_args: Any
) -> Any:
    """Call ``handler`` with ``ctx`` (or ``context(**context_args)``) and return its result;
    an async handler is run to completion on a new event loop (from async code, ``arun``)."""
    ctx = _context(ctx, context_args)
    if inspect.iscoroutinefunction(handler):
        _no_running_loop()
        return asyncio.run(handler(ctx))
    result = handler(ctx)
    if inspect.isawaitable(result):
        _no_running_loop()
        return asyncio.run(_awaited(result))
    return result


async def arun(
    handler: Callable[[RunContext], Any], ctx: RunContext | None = None, **context_args: Any
) -> Any:
    """``run`` for async tests: awaits an async handler on the running loop."""
    ctx = _context(ctx, context_args)
    result = handler(ctx)
    return await result if inspect.isawaitable(result) else result


def _context(ctx: RunContext | None, context_args: Mapping[str, Any]) -> RunContext:
    if ctx is not None and context_args:
        raise TypeError("give a ctx or context arguments, not both")
    return ctx if ctx is not None else context(**context_args)


def _no_running_loop() -> None:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return
    raise RuntimeError("an event loop is running here: use `await pulsecron.testing.arun(...)`")


async def _awaited(value: Any) -> Any:
    return await value
