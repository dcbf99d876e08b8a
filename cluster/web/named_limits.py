"""``/api/limits``: named limits shared across jobs over HTTP, as ``pulse limits`` reads and
sets them (docs/limits.md, docs/design/limits.md).

Any token reads the keys; a tenant-scoped token reads the cluster-wide keys and its
tenant's own, and of their holders and waiters its tenant's alone (the statement filters by
it). An admin token sets and removes keys: a cluster-wide key only with a token not scoped
to a tenant, since it caps every tenant's jobs; a tenant's own key with that tenant's
token too, since only its jobs can use it. Each change writes its audit row in its
transaction.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, HTTPException, Request, Response

from cluster.web.audit import record
from cluster.web.auth import Admin, Principal, Reader, unscoped
from cluster.web.bodies import json_object, request_body
from cluster.web.state import state_of

router = APIRouter(tags=["limits"])
_KEY_BODY = request_body(
    {
        "type": "object",
        "properties": {
            "max_concurrent": {"type": "integer", "minimum": 1, "maximum": 1_000_000},
            "rate": {"type": "string", "pattern": "^[0-9]+/[0-9]*(s|min|h)$"},
        },
        "additionalProperties": False,
    }
)


def _reach(who: Principal, tenant: str | None) -> None:
    """403 unless the token may change ``tenant``'s keys (None: the cluster-wide ones)."""
    if tenant is None:
        unscoped(who)
    elif who.scope is not None and who.scope != tenant:
        raise HTTPException(403, "this token changes its own tenant's keys only")


@router.get("/api/limits")
async def keys(request: Request, who: Reader) -> list[dict[str, Any]]:
    """Every key with its runs in flight, holders and waiters (a scoped token: the
    cluster-wide keys and its tenant's, and its tenant's holders and waiters only)."""
    async with state_of(request).pool.store(who.scope) as store:
        return [x.to_json() for x in await store.limits.keys(who.scope)]


@router.put("/api/limits/{key}", openapi_extra=_KEY_BODY)
async def set_key(
    request: Request, key: str, who: Admin, tenant: str | None = None
) -> dict[str, Any]:
    """Create the key (``?tenant=T``: that tenant's own), or give it exactly these limits:
    {"max_concurrent": N, "rate": "100/min"}, one of them or both."""
    _reach(who, tenant)
    body = await json_object(request, {"max_concurrent", "rate"})
    async with state_of(request).pool.store(who.scope) as store, store.transaction():
        found = await store.limits.set(
            key, tenant=tenant, max_concurrent=body.get("max_concurrent"), rate=body.get("rate")
        )
        await record(store, who, "set key", tenant, None, f"{key}: {found.describe()}")
    return found.to_json()


@router.delete("/api/limits/{key}", status_code=204)
async def remove_key(request: Request, key: str, who: Admin, tenant: str | None = None) -> Response:
    """Remove the key (404 if there is none, 409 while a job uses it)."""
    _reach(who, tenant)
    async with state_of(request).pool.store(who.scope) as store, store.transaction():
        await store.limits.remove(key, tenant)
        await record(store, who, "remove key", tenant, None, key)
    return Response(status_code=204)
