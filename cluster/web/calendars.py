"""``/api/calendars`` and ``/api/windows``: the business calendars and blackout windows
jobs plan with, read over HTTP as ``pulse calendars`` and ``pulse windows list`` print them
(docs/time.md).

Calendars are shared by every tenant and hold no secret: any token reads them; a scoped
token sees the windows of the cluster and of its tenant. Changing either re-plans jobs of
many tenants, so it stays an operator's command (``pulse calendars``, ``pulse windows``).
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request

from cluster.jobs.fields import validate_name
from cluster.web.auth import Reader
from cluster.web.state import state_of

router = APIRouter(tags=["calendars"])


@router.get("/api/calendars")
async def list_calendars(request: Request, who: Reader) -> list[dict[str, Any]]:
    """Every calendar: business weekdays, how many dates it excludes, how many jobs use it."""
    async with state_of(request).pool.store(who.scope) as store:
        return [c.to_json() for c in await store.calendars.list()]


@router.get("/api/calendars/{name}")
async def show_calendar(request: Request, name: str, who: Reader) -> dict[str, Any]:
    """One calendar with every date it excludes (404 if there is none)."""
    name = validate_name(name, "calendar")
    async with state_of(request).pool.store(who.scope) as store:
        return (await store.calendars.get(name)).to_json()  # NotFound: 404


@router.get("/api/windows")
async def list_windows(request: Request, who: Reader) -> list[dict[str, Any]]:
    """Every blackout window, past ones too (a scoped token: the cluster's and its tenant's)."""
    async with state_of(request).pool.store(who.scope) as store:
        found = await store.windows.list()
    return [w.to_json() for w in found if who.scope is None or w.tenant in (None, who.scope)]
