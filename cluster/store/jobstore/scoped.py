"""The admin connection of a ``JobStore`` with its tenant scope and the cluster's settings:
what every part of the store (``definitions``, ``runcontrol``, the store itself) runs its
statements through. Each statement on a job filters by the scope (``%(scope)s`` in
queries.sql); a change wakes the claim loops of its shard with ``NOTIFY``."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import datetime
from typing import Any

import psycopg

from cluster.errors import NotFound
from cluster.jobs.models import Job
from cluster.settings import ClusterSettings
from cluster.store.connect import Conn, Row
from cluster.store.jobstore.specs import check_params
from cluster.store.queries import fetch_all, fetch_one, query, store_error
from cluster.store.schema.migrate import stored_shard_count


class ScopedConnection:
    """``scope``: the one tenant it reaches, else all."""

    def __init__(self, conn: Conn, settings: ClusterSettings, scope: str | None) -> None:
        self.conn = conn
        self.settings = settings
        self.scope = scope
        self._shards: int | None = None
        self._writes_runs: bool | None = None

    @asynccontextmanager
    async def transaction(self) -> AsyncIterator[None]:
        """One transaction (or a savepoint in one) around several statements."""
        try:
            async with self.conn.transaction():
                yield
        except psycopg.Error as exc:
            raise store_error(exc) from exc

    async def one(self, name: str, params: dict[str, Any]) -> Row | None:
        params = {"scope": self.scope, **params}
        check_params(params)
        return await fetch_one(self.conn, name, params)

    async def all(self, name: str, params: dict[str, Any]) -> list[Row]:
        params = {"scope": self.scope, **params}
        check_params(params)
        return await fetch_all(self.conn, name, params)

    async def notify(self, shard: int) -> None:
        await self.conn.execute(
            query("notify"), {"channel": self.settings.wake_channel, "payload": str(shard)}
        )

    async def job(self, statement: str, name: str, tenant: str) -> Job:
        """The job read by ``statement`` (``get_job``, or ``lock_job``: its row locked until
        the transaction ends); ``NotFound`` if there is none."""
        row = await self.one(statement, {"tenant_id": tenant, "name": name})
        if row is None:
            raise NotFound(f"no job named {name!r} in tenant {tenant!r}")
        return Job.from_row(row)

    async def shard_count(self) -> int:
        if self._shards is None:
            self._shards = await stored_shard_count(self.conn)
        return self._shards

    async def writes_runs(self) -> bool:
        """Whether this login may insert runs itself: ``record_skipped`` then records any
        slot it is given, where a web login's only records slots still to be decided."""
        if self._writes_runs is None:
            row = await self.one("may_write_runs", {})
            self._writes_runs = bool(row and row["may"])
        return self._writes_runs

    def fix_shard_count(self, shards: int) -> None:
        """The count ``pulse init`` just fixed."""
        self._shards = shards

    async def db_now(self, now: datetime | None = None) -> datetime:
        row = await self.one("db_now", {"now": now})
        assert row is not None
        value: datetime = row["now"]
        return value
