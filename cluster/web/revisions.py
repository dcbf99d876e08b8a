"""A job's revisions over HTTP: ``GET /api/jobs/{tenant}/{name}/revisions`` (any token of
the tenant) and ``POST .../rollback`` (write tokens), as ``pulse jobs history`` and
``pulse jobs rollback``. The tenant scope is in the SQL (``job_revisions``); a rollback
writes its revision under the token's name and its audit row in one transaction."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from fastapi import APIRouter, Query, Request

from cluster.errors import InvalidInput, NotFound
from cluster.web.audit import record
from cluster.web.auth import Reader, Writer
from cluster.web.bodies import json_object
from cluster.web.forwarded import api_targets
from cluster.web.jobs import admitted
from cluster.web.state import state_of

router = APIRouter(tags=["jobs"])


@router.get("/api/jobs/{tenant}/{name:path}/revisions")
async def list_revisions(
    request: Request,
    tenant: str,
    name: str,
    who: Reader,
    before: int | None = Query(None, ge=1, description="Revisions older than this one."),
    limit: int = Query(100, ge=1, le=1000),
) -> dict[str, Any]:
    """The job's revisions, newest first: who changed which fields, how and when."""
    async with state_of(request).pool.store(who.scope) as store:
        found = await store.revisions.history(name, tenant, before=before, limit=limit)
    if not found:
        raise NotFound(f"no job named {name!r} in tenant {tenant!r} has a history")
    return {
        "revisions": [r.to_json() for r in found],
        "next_before": found[-1].revision if len(found) == limit else None,
    }


@router.post("/api/jobs/{tenant}/{name:path}/rollback")
async def rollback_job(request: Request, tenant: str, name: str, who: Writer) -> dict[str, Any]:
    """Write revision {"to": N}'s definition again as the job's newest revision (422 for a
    revision the job never had; nothing is written)."""
    if who.scope is not None and tenant != who.scope:  # as for a job nobody has
        raise NotFound(f"no job named {name!r} in tenant {tenant!r}")
    to = (await json_object(request, {"to"})).get("to")
    if isinstance(to, bool) or not isinstance(to, int) or to < 1:
        raise InvalidInput("to", "must be a revision number (a whole number >= 1)")
    async with state_of(request).pool.store(who.scope) as store:
        spec = await store.revisions.spec_at(name, tenant, to)
    # Restored like any job the API writes: its handler admitted by today's allow-list.
    (spec,) = await admitted(request, who, [replace(spec, api_run=True)])
    (spec,) = await api_targets(request, [spec])
    async with state_of(request).pool.store(who.scope, actor=who.name) as store:
        async with store.transaction():
            done = await store.revisions.restore(spec, to)
            if done.revision is not None:
                await record(store, who, "rollback", tenant, name, f"to revision {to}")
        return {"restored": done.restored, "revision": done.revision}
