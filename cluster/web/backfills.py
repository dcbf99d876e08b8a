"""``/api/jobs/{tenant}/{name}/backfill``, ``/api/backfills``: backfill requests over HTTP,
as ``pulse jobs backfill`` and ``pulse backfills`` make and read them (docs/time.md). A
tenant-scoped token reaches only its tenant's (the statements filter by ``%(scope)s``)."""

from __future__ import annotations

import contextlib
from typing import Any

from fastapi import APIRouter, HTTPException, Query, Request

from cluster.errors import InvalidInput, NotFound
from cluster.jobs.fields import MAX_NAME_LENGTH
from cluster.jobs.models import iso
from cluster.web.audit import record
from cluster.web.auth import Reader, Writer
from cluster.web.bodies import iso_time, json_object
from cluster.web.jobs import runnable
from cluster.web.state import state_of

router = APIRouter(tags=["backfills"])
KEYS = {"from", "to", "only_missing", "max_parallel", "dry_run"}


def _flag(body: dict[str, Any], key: str) -> bool:
    value = body.get(key, False)
    if not isinstance(value, bool):
        raise InvalidInput(key, "must be true or false")
    return value


@router.post("/api/jobs/{tenant}/{name:path}/backfill", status_code=201)
async def backfill(request: Request, tenant: str, name: str, who: Writer) -> dict[str, Any]:
    """Run the job's slots in [from, to) again, oldest first: {"from", "to", "only_missing",
    "max_parallel", "dry_run"}. With dry_run, the slots it would run, and nothing written."""
    body = await json_object(request, KEYS)
    start, end = iso_time(body.get("from"), "from"), iso_time(body.get("to"), "to")
    max_parallel = body.get("max_parallel", 1)
    dry_run = _flag(body, "dry_run")
    async with state_of(request).pool.store(who.scope) as store, store.transaction():
        with contextlib.suppress(NotFound):  # the backfill answers that, its input checked first
            runnable(await store.get(name, tenant))
        plan = await store.runcontrol.backfill(
            name,
            tenant,
            start=start,
            end=end,
            only_missing=_flag(body, "only_missing"),
            max_parallel=max_parallel,
            dry_run=dry_run,
        )
        if plan.backfill is not None:
            await record(store, who, "backfill", tenant, name, f"{len(plan.slots)} slots")
    slots = [iso(s) for s in plan.slots]
    if plan.backfill is None:
        return {"dry_run": True, "slots": slots}
    return {**plan.backfill.to_json(), "slots": slots}


@router.get("/api/backfills")
async def backfills(
    request: Request,
    who: Reader,
    tenant: str | None = Query(None, max_length=MAX_NAME_LENGTH),
    limit: int = Query(100, ge=1, le=500, description="The newest requests, at most."),
) -> list[Any]:
    """The newest ``limit`` backfill requests with their progress, oldest first."""
    async with state_of(request).pool.store(who.scope) as store:
        return [b.to_json() for b in await store.runcontrol.backfills(tenant, limit)]


@router.post("/api/backfills/{backfill_id}/cancel")
async def cancel(request: Request, backfill_id: int, who: Writer) -> dict[str, Any]:
    """Stop a backfill: nothing more is queued; running slots finish."""
    async with state_of(request).pool.store(who.scope) as store, store.transaction():
        try:
            found = await store.runcontrol.cancel_backfill(backfill_id)
        except InvalidInput as exc:  # unknown, or another tenant's: as if absent
            raise HTTPException(404, f"no backfill {backfill_id}") from exc
        await record(store, who, "cancel backfill", found.tenant, found.job, str(backfill_id))
    return found.to_json()
