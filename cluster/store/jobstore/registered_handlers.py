"""Python handlers offered to the HTTP API by code: the ``registered_handlers`` table
(migration 017). Nodes that load registries and ``pulse jobs apply --module`` record what
their registries register, per tenant; the API reads it before it writes a job, so it never
imports a module named by a request (``cluster.config.admission``)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import psycopg

from cluster.jobs.models import iso
from cluster.store.connect import Conn
from cluster.store.queries import query, store_error


@dataclass(frozen=True)
class Registered:
    tenant: str
    handler: str
    registered_by: str
    registered_at: datetime

    def to_json(self) -> dict[str, Any]:
        return {
            "tenant": self.tenant,
            "handler": self.handler,
            "registered_by": self.registered_by,
            "registered_at": iso(self.registered_at),
        }


class RegisteredHandlers:
    """The table, on the admin connection ``conn``."""

    def __init__(self, conn: Conn) -> None:
        self._conn = conn

    async def register(self, pairs: Iterable[tuple[str, str]], by: str) -> None:
        """Record each (tenant, handler) as offered by ``by`` (a node id, or the CLI)."""
        unique = sorted(set(pairs))
        if not unique:
            return
        params = {
            "tenants": [t for t, _ in unique],
            "handlers": [h for _, h in unique],
            "by": by,
        }
        try:
            await self._conn.execute(query("handlers_register"), params)
        except psycopg.Error as exc:
            raise store_error(exc) from exc

    async def usable(self, scope: str | None) -> frozenset[str]:
        """The handlers a token of tenant ``scope`` may use; any registered one for None."""
        try:
            cur = await self._conn.execute(query("handlers_registered"), {"scope": scope})
            rows = await cur.fetchall()
        except psycopg.Error as exc:
            raise store_error(exc) from exc
        return frozenset(r["handler"] for r in rows)

    async def remove(self, handler: str, tenant: str | None = None) -> int:
        """Stop offering ``handler`` (``tenant``'s offer only, or every one); how many."""
        params = {"handler": handler, "tenant_id": tenant}
        try:
            cur = await self._conn.execute(query("handlers_remove"), params)
        except psycopg.Error as exc:
            raise store_error(exc) from exc
        return cur.rowcount

    async def all(self) -> list[Registered]:
        try:
            cur = await self._conn.execute(query("handlers_list"))
            rows = await cur.fetchall()
        except psycopg.Error as exc:
            raise store_error(exc) from exc
        return [
            Registered(r["tenant_id"], r["handler"], r["registered_by"], r["registered_at"])
            for r in rows
        ]
