"""Named limits shared across jobs: the ``limit_keys`` rows (``pulse limits``), who holds
and who waits for each, and the key a job's slot waits for (0.3.0_pre_uses_named_limits).

A key holds across the cluster because Postgres keeps it: a run takes every key its job
uses when its row turns ``running`` (a trigger refuses the row unless it gets them all) and
gives them back when the row leaves that status. A key is cluster-wide, or a tenant's own,
which only that tenant's jobs can name. Why so: docs/design/limits.md.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any
from uuid import UUID

from cluster.errors import Conflict, InvalidInput, NotFound
from cluster.jobs.fields import validate_name
from cluster.jobs.limitkeys import Rate, parse_rate
from cluster.jobs.models import iso
from cluster.store.connect import Conn
from cluster.store.jobstore.tenant_limits import check_limit
from cluster.store.queries import fetch_all, fetch_one

__all__ = ["LimitKey", "NamedLimits", "Waiting"]


@dataclass(frozen=True)
class LimitKey:
    name: str
    tenant: str | None  # None: cluster-wide
    max_concurrent: int | None
    rate: Rate | None
    running: int  # runs holding it now
    updated_at: datetime
    holders: list[dict[str, Any]] = field(default_factory=list)  # tenant, job, slot, node
    waiters: list[dict[str, Any]] = field(default_factory=list)  # tenant, job, slot, since

    @classmethod
    def from_row(cls, row: dict[str, Any]) -> LimitKey:
        rate = None if row["rate"] is None else Rate(row["rate"], row["per_s"])
        return cls(
            row["name"],
            row["tenant"],
            row["max_concurrent"],
            rate,
            row["running"],
            row["updated_at"],
            row["holders"],
            row["waiters"],
        )

    def describe(self) -> str:
        parts = []
        if self.max_concurrent is not None:
            parts.append(f"at most {self.max_concurrent} at once")
        if self.rate is not None:
            parts.append(f"at most {self.rate}")
        return ", ".join(parts)

    def to_json(self) -> dict[str, Any]:
        return {
            "key": self.name,
            "tenant": self.tenant,
            "max_concurrent": self.max_concurrent,
            "rate": None if self.rate is None else str(self.rate),
            "running": self.running,
            "holders": self.holders,
            "waiters": self.waiters,
            "updated_at": iso(self.updated_at),
        }


@dataclass(frozen=True)
class Waiting:
    """The key a job's slot waits for, since when."""

    key: str
    slot: datetime
    since: datetime

    def to_json(self) -> dict[str, Any]:
        return {"key": self.key, "slot": iso(self.slot), "since": iso(self.since)}


def _scope(tenant: str | None) -> str:
    return "" if tenant is None else validate_name(tenant, "tenant")


class NamedLimits:
    """The cluster's named limits, on the admin connection ``conn`` (in the caller's
    transaction, if any, so an audit row commits with the change)."""

    def __init__(self, conn: Conn) -> None:
        self._conn = conn

    async def set(
        self,
        name: str,
        *,
        tenant: str | None = None,
        max_concurrent: int | None = None,
        rate: str | None = None,
    ) -> LimitKey:
        """The key ``name`` (``tenant``'s own, else cluster-wide) with exactly these limits;
        ``InvalidInput`` for a bad name, limit or rate, or neither given."""
        name = validate_name(name, "key")
        params = {
            "key_scope": _scope(tenant),
            "name": name,
            "max_concurrent": None if max_concurrent is None else check_limit(max_concurrent),
            "rate": None,
            "per_s": None,
        }
        if rate is not None:
            parsed = parse_rate(rate)
            params.update(rate=parsed.count, per_s=parsed.per_s)
        if max_concurrent is None and rate is None:
            raise InvalidInput("key", "give --max-concurrent, --rate or both")
        async with self._conn.transaction():
            await fetch_one(self._conn, "limit_set", params)
        return await self.get(name, tenant)

    async def get(self, name: str, tenant: str | None = None) -> LimitKey:
        """The key ``name`` of ``tenant`` (None: the cluster-wide one); ``NotFound``."""
        scope = _scope(tenant)
        for key in await self.keys(tenant):
            if key.name == name and (key.tenant or "") == scope:
                return key
        raise NotFound(f"no limit key {name!r}" + (f" of tenant {tenant!r}" if tenant else ""))

    async def remove(self, name: str, tenant: str | None = None) -> None:
        """Remove the key; ``NotFound`` if there is none, ``Conflict`` while a job uses it."""
        name = validate_name(name, "key")
        params = {"key_scope": _scope(tenant), "name": name}
        async with self._conn.transaction():
            if await fetch_one(self._conn, "limit_lock", params) is None:
                raise NotFound(
                    f"no limit key {name!r}" + (f" of tenant {tenant!r}" if tenant else "")
                )
            users = await fetch_all(self._conn, "limit_users", params)
            if users:
                shown = ", ".join(f"{u['tenant_id']}/{u['name']}" for u in users)
                more = users[0]["total"] - len(users)
                raise Conflict(
                    "key",
                    f"{name!r} is used by {users[0]['total']} job(s): {shown}"
                    + (f" and {more} more" if more > 0 else "")
                    + "; take it out of their uses first",
                )
            await fetch_one(self._conn, "limit_remove", params)

    async def keys(self, tenant: str | None = None) -> list[LimitKey]:
        """Every key, with its holders and waiters; ``tenant``: the cluster-wide keys and
        that tenant's own, and of their holders and waiters that tenant's alone."""
        rows = await fetch_all(self._conn, "limit_keys_list", {"tenant_id": tenant})
        return [LimitKey.from_row(r) for r in rows]

    async def waiting(self, job_id: UUID) -> Waiting | None:
        """The key the job's slot waits for now, if any."""
        row = await fetch_one(self._conn, "limit_waiting", {"job_id": job_id})
        return None if row is None else Waiting(row["key_name"], row["slot"], row["since"])
