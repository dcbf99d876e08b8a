"""``/api/calendars``: the business calendars jobs plan with, read over HTTP as
``pulse calendars list/show`` prints them (docs/time.md).

Calendars are shared by every tenant and hold no secret: any token reads them. Changing one
re-plans jobs of every tenant, so it stays an operator's command (``pulse calendars add``).
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request

from cluster.jobs.spec import validate_name
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
