"""``/api/status`` (the data of ``pulse status --json``), ``/api/lag`` (fire lag per minute,
for the console's chart) and ``/api/schedule`` (the next slots of an expression)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any
from zoneinfo import ZoneInfo

from fastapi import APIRouter, Query, Request

from cluster.health.status import collect
from cluster.jobs.models import iso
from cluster.timing.schedule import parse_schedule
from cluster.web.auth import Reader, unscoped
from cluster.web.bodies import MAX_QUERY_LENGTH
from cluster.web.state import state_of

router = APIRouter(tags=["cluster"])

LAG_WINDOW_S = 3600.0


@router.get("/api/status")
async def status(request: Request, who: Reader) -> dict[str, Any]:
    """Members by zone, shard coverage, backlog, fire lag, outcomes (every tenant's, so a
    token scoped to a tenant gets 403); ``holders`` maps each held shard to its node."""
    unscoped(who)
    found = await collect(state_of(request).pool.settings)
    return {**found.to_json(), "holders": {str(s): n for s, n in sorted(found.holders.items())}}


@router.get("/api/lag")
async def lag(request: Request, who: Reader) -> dict[str, Any]:
    """Fire lag p50/p99 of first attempts per minute over the last hour."""
    unscoped(who)
    async with state_of(request).pool.store() as store:
        minutes = await store.pages.lag_series(LAG_WINDOW_S)
    return {"window_s": LAG_WINDOW_S, "minutes": minutes}


@router.get("/api/schedule")
async def schedule(
    who: Reader,
    expr: str = Query(
        ...,
        max_length=MAX_QUERY_LENGTH,
        description="Cron (5 or 6 fields), @hourly..., @every 30s.",
    ),
    tz: str = Query("UTC", max_length=MAX_QUERY_LENGTH, description="IANA time zone."),
    count: int = Query(5, ge=1, le=1000),
) -> dict[str, Any]:
    """The next ``count`` slots of ``expr`` in ``tz`` (and in UTC)."""
    parsed = parse_schedule(expr, tz)
    slots = parsed.next_n(datetime.now(UTC), count)
    zone = ZoneInfo(parsed.tz)
    return {
        "expr": parsed.expr,
        "tz": parsed.tz,
        "slots": [iso(s.astimezone(zone)) for s in slots],
        "slots_utc": [iso(s.astimezone(UTC)) for s in slots],
    }
