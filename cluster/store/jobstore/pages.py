"""Paged reads for the HTTP API and the console: jobs by (tenant, name) after a cursor, runs
newest first before a cursor, and the fire lag per minute. Each carries the store's tenant
scope into its statement. A page of jobs or runs comes as the JSON text the statement wrote
(``cluster.jobs.sqljson``): nothing reads its rows in Python, the API passes it on."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from psycopg.types.json import Jsonb

from cluster.jobs.fields import check_text
from cluster.store.connect import Conn
from cluster.store.queries import fetch_all


@dataclass(frozen=True)
class JobPage:
    """A page of jobs: ``jobs``, a JSON array of ``Job.to_json`` objects as text; how many;
    and the (tenant, name) of the last (None for an empty page)."""

    jobs: str
    count: int
    last: tuple[str, str] | None


@dataclass(frozen=True)
class RunPage:
    """A page of runs: ``runs``, a JSON array of ``Run.to_json`` objects as text; how many;
    and the (slot, id) of the last, newest first (id 0: an attempt in flight without a row;
    None for an empty page)."""

    runs: str
    count: int
    last: tuple[datetime, int] | None


class Pages:
    def __init__(self, conn: Conn, scope: str | None) -> None:
        self._conn = conn
        self._scope = scope

    async def jobs(
        self,
        *,
        tenant: str | None = None,
        status: str | None = None,
        q: str | None = None,
        after: tuple[str, str] | None = None,
        limit: int = 100,
        labels: Mapping[str, str] | None = None,
    ) -> JobPage:
        """Jobs by (tenant, name), those after ``after`` only, with every one of ``labels``."""
        params = {
            "labels": Jsonb(dict(labels)) if labels else None,
            "tenant_id": tenant,
            "status": status,
            "q": q or None,
            "after_tenant": after[0] if after else None,
            "after_name": after[1] if after else None,
            "limit": limit,
        }
        (row,) = await self._rows("jobs_page", params)
        last = (row["last_tenant"], row["last_name"]) if row["found"] else None
        return JobPage(row["jobs"], row["found"], last)

    async def runs(
        self,
        *,
        tenant: str | None = None,
        job: str | None = None,
        status: str | None = None,
        since: datetime | None = None,
        before: tuple[datetime, int] | None = None,
        limit: int = 100,
    ) -> RunPage:
        """Runs newest slot first, those before ``before`` (slot, id) only."""
        params = {
            "tenant_id": tenant,
            "job_name": job,
            "status": status,
            "since": since,
            "before_at": before[0] if before else None,
            "before_id": before[1] if before else None,
            "limit": limit,
        }
        (row,) = await self._rows("runs_page", params)
        last = (row["last_at"], row["last_id"] or 0) if row["found"] else None
        return RunPage(row["runs"], row["found"], last)

    async def lag_series(
        self, window_s: float = 3600.0, now: datetime | None = None
    ) -> list[dict[str, Any]]:
        """Fire lag p50/p99 of first attempts, per minute of the window (all tenants)."""
        rows = await self._rows("lag_series", {"window_s": window_s, "now": now})
        return [
            {
                "minute": r["minute"].isoformat(),
                "p50_s": r["p50_s"],
                "p99_s": r["p99_s"],
                "samples": r["samples"],
            }
            for r in rows
        ]

    async def _rows(self, name: str, params: dict[str, Any]) -> list[dict[str, Any]]:
        params = {"scope": self._scope, **params}
        for key, value in params.items():
            if isinstance(value, str):
                check_text(value, key)
        return await fetch_all(self._conn, name, params)
