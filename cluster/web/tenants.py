"""``/api/tenants``: the per-tenant limits of concurrent runs over HTTP, as ``pulse tenants``
reads and sets them (docs/time.md, docs/design/fairness.md).

Any token reads the limits; a tenant-scoped token reads only its tenant's (the statement
filters by it). Setting or lifting a limit is a cluster operator's decision, since it
shields the other tenants: admin tokens not scoped to a tenant only (a tenant's own admin
must not lift its cap). Each change writes its audit row in its transaction.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, HTTPException, Request, Response

from cluster.errors import InvalidInput
from cluster.jobs.fields import validate_name
from cluster.web.audit import record
from cluster.web.auth import Admin, Reader, unscoped
from cluster.web.bodies import json_object, request_body
from cluster.web.state import state_of

router = APIRouter(tags=["tenants"])
_LIMIT_BODY = request_body(
    {
        "type": "object",
        "required": ["max_concurrent"],
        "properties": {"max_concurrent": {"type": "integer", "minimum": 1, "maximum": 1_000_000}},
        "additionalProperties": False,
    }
)


@router.get("/api/tenants/limits")
async def limits(request: Request, who: Reader) -> list[dict[str, Any]]:
    """Every tenant's limit with its runs in flight (a scoped token: its tenant's only)."""
    async with state_of(request).pool.store(who.scope) as store:
        return [x.to_json() for x in await store.tenants.limits(who.scope)]


@router.put("/api/tenants/{tenant}/limit", openapi_extra=_LIMIT_BODY)
async def set_limit(request: Request, tenant: str, who: Admin) -> dict[str, Any]:
    """Run at most {"max_concurrent": N} of the tenant's slots at once across the cluster
    (1 to 1,000,000), counting those running now."""
    unscoped(who)
    body = await json_object(request, {"max_concurrent"})
    max_concurrent: Any = body.get("max_concurrent")  # set_limit checks it
    async with state_of(request).pool.store(who.scope) as store, store.transaction():
        found = await store.tenants.set_limit(tenant, max_concurrent)
        detail = f"max_concurrent {found.max_concurrent}"
        await record(store, who, "set limit", found.tenant, None, detail)
    return found.to_json()


@router.delete("/api/tenants/{tenant}/limit", status_code=204)
async def clear_limit(request: Request, tenant: str, who: Admin) -> Response:
    """Lift the tenant's limit (404 if it has none)."""
    unscoped(who)
    tenant = validate_name(tenant, "tenant")
    async with state_of(request).pool.store(who.scope) as store, store.transaction():
        try:
            await store.tenants.clear_limit(tenant)
        except InvalidInput as exc:  # the name is valid: the tenant has no limit
            raise HTTPException(404, exc.problem) from exc
        await record(store, who, "clear limit", tenant, None)
    return Response(status_code=204)
