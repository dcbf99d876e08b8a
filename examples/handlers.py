"""Handlers of the example gateway's jobs: they log what a real one would do, offline.

Each handler receives Pulse's run context (``job_name``, ``tenant_id``, ``payload``,
``scheduled_for``, ``attempt``, ``idempotency_key``, ``node_id``...). Side effects a real
gateway would have (writing invoices, deleting cache entries, calling an upstream) are only
logged, and derived from the slot time so that every node computes the same numbers.
Every line names the job, tenant, slot and attempt (the node adds its own id), so
``pulse --log-format json`` makes them easy to follow.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import time
from typing import Any

logger = logging.getLogger("examples.gateway")


def _extra(ctx: Any, event: str) -> dict[str, object]:
    return {
        "event": event,
        "job": ctx.job_name,
        "tenant": ctx.tenant_id,
        "slot": ctx.scheduled_for.isoformat(),
        "attempt": ctx.attempt,
    }


def _number(ctx: Any, salt: str, modulo: int) -> int:
    """A stable pseudo-random number for this slot, the same on every node and attempt."""
    key = f"{ctx.idempotency_key}:{salt}".encode()
    return int.from_bytes(hashlib.blake2b(key, digest_size=4).digest(), "big") % modulo


def billing_rollup(ctx: Any) -> None:
    """Hourly: roll one tenant's API usage of the past hour into its invoice lines.

    Idempotent by ``idempotency_key`` (job + slot): a retry or a backfilled slot rewrites
    the same invoice line, so at-least-once execution never bills twice.
    """
    plan = str(ctx.payload.get("plan", "standard"))
    price = float(ctx.payload.get("price_per_1k", 0.02))
    requests = 10_000 + _number(ctx, "requests", 90_000)
    amount = requests / 1000 * price
    time.sleep(0.05)  # the aggregate query of a real gateway
    logger.info(
        "billed %d requests on plan %s: %.2f USD (invoice line %s)",
        requests,
        plan,
        amount,
        ctx.idempotency_key,
        extra=_extra(ctx, "billing_rolled_up"),
    )


def cache_prune(ctx: Any) -> None:
    """Every 15 minutes: drop expired response-cache entries (skipped if it ran late)."""
    max_age = str(ctx.payload.get("max_age", "1h"))
    pruned = _number(ctx, "pruned", 5_000)
    logger.info(
        "pruned %d cache entries older than %s",
        pruned,
        max_age,
        extra=_extra(ctx, "cache_pruned"),
    )


async def upstream_health(ctx: Any) -> None:
    """Every 30 s: probe each upstream (simulated: no network) and log its latency."""
    for upstream in ctx.payload.get("upstreams", ["api"]):
        await asyncio.sleep(0.01)
        latency_ms = 5 + _number(ctx, upstream, 120)
        status = "degraded" if latency_ms > 110 else "ok"
        logger.info(
            "upstream %s %s in %d ms",
            upstream,
            status,
            latency_ms,
            extra=_extra(ctx, "upstream_checked"),
        )


def rate_limit_sync(ctx: Any) -> None:
    """Every 2 s: publish the tenant's rate-limit counters to the edge (fast job)."""
    tokens = _number(ctx, "tokens", 1_000)
    logger.info("synced rate limits: %d tokens left", tokens, extra=_extra(ctx, "limits_synced"))


def session_sweep(ctx: Any) -> None:
    """Every 3 s: expire idle client sessions (fast job)."""
    expired = _number(ctx, "sessions", 20)
    logger.info("expired %d idle sessions", expired, extra=_extra(ctx, "sessions_swept"))


def webhook_retry(ctx: Any) -> None:
    """Every 5 s: redeliver failed webhooks. The first attempt of some slots fails on
    purpose (a flaky receiver), so Pulse's retries are visible in the logs and metrics."""
    flaky_every = int(ctx.payload.get("flaky_every", 4))
    if ctx.attempt == 1 and flaky_every and _number(ctx, "flaky", flaky_every) == 0:
        logger.warning("receiver answered 503; Pulse will retry", extra=_extra(ctx, "webhook"))
        raise RuntimeError("webhook receiver answered 503 Service Unavailable")
    delivered = _number(ctx, "delivered", 10)
    logger.info("redelivered %d webhooks", delivered, extra=_extra(ctx, "webhooks_redelivered"))
