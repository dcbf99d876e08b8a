"""The audit trail over HTTP: the row every change writes, and ``GET /api/tokens/audit``
(admin). The slot ledger's audit is ``GET /api/audit`` (``cluster.web.ledger``)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Query, Request

from cluster.store.jobstore.store import JobStore
from cluster.web.auth import Admin, Principal
from cluster.web.state import state_of

router = APIRouter(tags=["audit"])


async def record(
    store: JobStore,
    who: Principal,
    action: str,
    tenant: str | None,
    job: str | None,
    detail: str | None = None,
) -> None:
    """Write the audit row of a change, in the caller's transaction."""
    await store.access.audit(
        who.name, action, tenant=tenant, job=job, source=who.source, detail=detail
    )


@router.get("/api/tokens/audit")
async def list_audit(
    who: Admin,
    request: Request,
    before: int | None = Query(None, ge=1, description="Entries older than this id."),
    limit: int = Query(100, ge=1, le=1000),
) -> dict[str, Any]:
    """Changes made through the API, newest first (a scoped token sees its tenant's)."""
    async with state_of(request).pool.store(who.scope) as store:
        found = await store.access.audit_entries(scope=who.scope, before=before, limit=limit)
    return {
        "entries": [e.to_json() for e in found],
        "next_before": found[-1].id if len(found) == limit else None,
    }
