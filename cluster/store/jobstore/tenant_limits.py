"""Per-tenant limits of concurrent runs: the ``tenant_limits`` rows and the marks on a
tenant's jobs and flights that make the claim enforce them (migration 014).

A limit holds across the cluster because Postgres keeps it: a run takes one of its
tenant's places when its row turns ``running`` (a trigger refuses the row at the limit) and
gives it back when the row leaves that status. Setting a limit marks the tenant's rows and
counts the places its running rows already hold, so a limit set while runs are in flight
counts them. Why so: docs/design/fairness.md.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

import psycopg

from cluster.errors import InvalidInput, StoreError
from cluster.jobs.fields import validate_name
from cluster.jobs.models import iso
from cluster.store.connect import Conn, describe
from cluster.store.queries import query

__all__ = ["MAX_LIMIT", "TenantLimit", "Tenants"]

MAX_LIMIT = 1_000_000


@dataclass(frozen=True)
class TenantLimit:
    tenant: str
    max_concurrent: int
    running: int  # places in use now
    updated_at: datetime

    @classmethod
    def from_row(cls, row: dict[str, Any]) -> TenantLimit:
        return cls(row["tenant_id"], row["max_concurrent"], row["running"], row["updated_at"])

    def to_json(self) -> dict[str, Any]:
        return {
            "tenant": self.tenant,
            "max_concurrent": self.max_concurrent,
            "running": self.running,
            "updated_at": iso(self.updated_at),
        }


def check_limit(value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_LIMIT:
        raise InvalidInput(
            "max_concurrent", f"must be a whole number from 1 to {MAX_LIMIT:,}, got {value!r}"
        )
    return value


class Tenants:
    """The limits of a cluster's tenants, on the admin connection ``conn``."""

    def __init__(self, conn: Conn) -> None:
        self._conn = conn

    async def set_limit(self, tenant: str, max_concurrent: int) -> TenantLimit:
        """At most ``max_concurrent`` runs of ``tenant`` at once across the cluster, counting
        those running now; ``InvalidInput`` for a bad tenant or a limit below 1."""
        tenant = validate_name(tenant, "tenant")
        params = {"tenant_id": tenant, "max": check_limit(max_concurrent), "limited": True}
        try:
            async with self._conn.transaction():
                # In this order: claims and completions hold job rows and never wait for
                # the limits row, so waiting here for their rows cannot deadlock.
                for name in ("tenant_limit_lock", "tenant_limit_upsert", "tenant_mark"):
                    await self._conn.execute(query(name), params)
                cur = await self._conn.execute(query("tenant_recount"), params)
                row = await cur.fetchone()
        except psycopg.Error as exc:
            raise StoreError(describe(exc)) from exc
        assert row is not None
        return TenantLimit.from_row(row)

    async def clear_limit(self, tenant: str) -> None:
        """Lift ``tenant``'s limit; ``InvalidInput`` if it has none."""
        tenant = validate_name(tenant, "tenant")
        params = {"tenant_id": tenant, "limited": False}
        try:
            async with self._conn.transaction():
                for name in ("tenant_limit_lock", "tenant_mark"):
                    await self._conn.execute(query(name), params)
                cur = await self._conn.execute(query("tenant_limit_remove"), params)
                found = await cur.fetchone()
                if found is None:
                    raise InvalidInput("tenant", f"{tenant!r} has no limit")
        except psycopg.Error as exc:
            raise StoreError(describe(exc)) from exc

    async def limits(self, tenant: str | None = None) -> list[TenantLimit]:
        """Every tenant's limit (or ``tenant``'s) with the places in use now."""
        try:
            cur = await self._conn.execute(query("tenant_limits"), {"tenant_id": tenant})
            return [TenantLimit.from_row(r) for r in await cur.fetchall()]
        except psycopg.Error as exc:
            raise StoreError(describe(exc)) from exc
