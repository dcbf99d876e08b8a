"""``/api/alerts``: the alert rules and their deliveries, read-only and for admin tokens
(rules span tenants). Rules are made with ``pulse alerts add``: over HTTP, a rule would be
a way to make every node send requests to an address of the caller's choosing."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Query, Request

from cluster.store.housekeeping.alerts import DELIVERY_STATUSES, AlertStore
from cluster.web.auth import Admin, unscoped
from cluster.web.state import state_of

router = APIRouter(tags=["alerts"])
STATUSES = f"^({'|'.join(DELIVERY_STATUSES)})$"


@router.get("/api/alerts")
async def rules(request: Request, who: Admin) -> list[dict[str, Any]]:
    """Every alert rule, its webhook redacted."""
    unscoped(who)
    async with AlertStore.open(state_of(request).pool.settings, "pulse-web") as store:
        return [rule.to_json() for rule in await store.rules()]


@router.get("/api/alerts/deliveries")
async def deliveries(
    request: Request,
    who: Admin,
    status: str | None = Query(None, pattern=STATUSES),
    limit: int = Query(50, ge=1, le=1000),
) -> list[dict[str, Any]]:
    """The newest deliveries of alert events, with their state."""
    unscoped(who)
    async with AlertStore.open(state_of(request).pool.settings, "pulse-web") as store:
        return [d.to_json() for d in await store.deliveries(status, limit)]
