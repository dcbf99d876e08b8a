"""``/api/tenants/.../quota``: tenants' quotas over HTTP, as ``pulse tenants quota`` reads
and sets them (cluster/store/jobstore/quotas.py).

Any token reads the quotas (a scoped token: its tenant's only). Setting or lifting one is
the cluster operator's decision, since a quota shields the other tenants: admin tokens not
scoped to a tenant only, so a tenant's own admin cannot lift its caps. Each change writes
its audit row in its transaction. The caps themselves are enforced by the database on every
write, whoever makes it.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, HTTPException, Request, Response

from cluster.errors import InvalidInput
from cluster.jobs.fields import validate_name
from cluster.store.jobstore.quotas import CAPS, MAX_CAP, MOST
from cluster.web.audit import record
from cluster.web.auth import Admin, Reader, unscoped
from cluster.web.bodies import json_object, request_body
from cluster.web.state import state_of

router = APIRouter(tags=["tenants"])
_QUOTA_BODY = request_body(
    {
        "type": "object",
        "minProperties": 1,
        "properties": {
            key: {"type": ["integer", "null"], "minimum": low, "maximum": MOST.get(key, MAX_CAP)}
            for key, low in CAPS.items()
        },
        "additionalProperties": False,
    }
)


@router.get("/api/tenants/quotas")
async def quotas(request: Request, who: Reader) -> list[dict[str, Any]]:
    """Every tenant's quota with its jobs now (a scoped token: its tenant's only)."""
    async with state_of(request).pool.store(who.scope) as store:
        return [x.to_json() for x in await store.quotas.quotas(who.scope)]


@router.put("/api/tenants/{tenant}/quota", openapi_extra=_QUOTA_BODY)
async def set_quota(request: Request, tenant: str, who: Admin) -> dict[str, Any]:
    """Set the caps given ({"max_jobs": 50, "max_parallel": null}: a number sets one, null
    lifts it); the others stay. Applies to what the tenant asks from now on."""
    unscoped(who)
    body = await json_object(request, set(CAPS))
    async with state_of(request).pool.store(who.scope) as store, store.transaction():
        found = await store.quotas.set(tenant, body)
        detail = found.describe() if found is not None else "no cap"
        await record(store, who, "set quota", validate_name(tenant, "tenant"), None, detail)
    if found is None:
        return {"tenant": tenant, **dict.fromkeys(CAPS)}
    return found.to_json()


@router.delete("/api/tenants/{tenant}/quota", status_code=204)
async def clear_quota(request: Request, tenant: str, who: Admin) -> Response:
    """Lift every cap of the tenant (404 if it has none)."""
    unscoped(who)
    tenant = validate_name(tenant, "tenant")
    async with state_of(request).pool.store(who.scope) as store, store.transaction():
        try:
            await store.quotas.clear(tenant)
        except InvalidInput as exc:  # the name is valid: the tenant has no quota
            raise HTTPException(404, exc.problem) from exc
        await record(store, who, "clear quota", tenant, None)
    return Response(status_code=204)
