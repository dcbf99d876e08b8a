"""Watch jobs through the store: a ping as it arrives (``POST /api/ping/TOKEN``), the token
a job is pinged with, and handing a watched job's slots over to Pulse (``pulse jobs adopt``).
A part of ``JobStore``; the statements and the ping's bookkeeping live in
``cluster.store.housekeeping.watches``, which the node's watch timeouts share.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from cluster.jobs.fields import DEFAULT_TENANT, validate_handler
from cluster.jobs.models import Job
from cluster.store.housekeeping import watches
from cluster.store.housekeeping.watches import Ping
from cluster.store.jobstore.scoped import ScopedConnection


class Watch:
    def __init__(self, db: ScopedConnection) -> None:
        self.db = db

    async def ping(
        self, token: str, kind: str, body: bytes = b"", *, now: datetime | None = None
    ) -> Ping | None:
        """Record a watch job's ping; None for an unknown token."""
        shards = await self.db.shard_count()
        async with self.db.transaction():
            at = await self.db.db_now(now)
            return await watches.record_ping(
                self.db.all, token, kind, body=body, shards=shards, now=at
            )

    async def token(self, name: str, tenant: str = DEFAULT_TENANT, *, rotate: bool = False) -> str:
        """A watch job's ping token (``pulse jobs ping-url``): its first, or a new one."""
        async with self.db.transaction():
            return await watches.issue_token(
                self.db.all, name, tenant, scope=self.db.scope, rotate=rotate
            )

    async def adopt(
        self,
        name: str,
        tenant: str = DEFAULT_TENANT,
        *,
        at: datetime,
        handler: str | None = None,
        now: datetime | None = None,
    ) -> Job:
        """Pulse runs the watch job from the slot ``at`` on."""
        if handler is not None:
            handler = validate_handler(handler)
        shards = await self.db.shard_count()
        async with self.db.transaction():
            db_now = await self.db.db_now(now)
            return await watches.adopt(
                self.db.all, name, tenant, at=at, handler=handler, scope=self.db.scope,
                shards=shards, now=db_now,
            )  # fmt: skip

    async def double_runs(self, name: str, tenant: str = DEFAULT_TENANT) -> list[dict[str, Any]]:
        """The legacy pings that came for slots Pulse runs (``pulse jobs adopt``)."""
        job = await self.db.job("get_job", name, tenant)
        return await self.db.all("watch_doubles_list", {"id": job.id})
