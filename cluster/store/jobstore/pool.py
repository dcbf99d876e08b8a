"""A pool of admin connections for a long-running service (``pulse web``): each request
borrows one and wraps it in a ``JobStore`` scoped to the caller's tenant.

The pool opens lazily and never waits for Postgres at start, so the service starts (and
answers 503) while the database is away.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import psycopg
from psycopg_pool import AsyncConnectionPool, PoolTimeout

from cluster.errors import PulseError, StoreError
from cluster.settings import ClusterSettings, mask_url
from cluster.store.connect import CONNECT_TIMEOUT_S, Conn, connect_kwargs, conninfo, describe
from cluster.store.jobstore.store import JobStore

POOL_SIZE = 8  # connections per process; cluster.web.inflight gives each token a share
DEFAULT_TOKEN_REQUESTS = POOL_SIZE // 2  # a token's share by default (pulse web --token-requests)
# No request's statement holds a pooled connection longer: a slow query a client can cause
# (a search, a large page) ends with an error instead of starving the others.
WEB_STATEMENT_TIMEOUT_S = 5.0


class StorePool:
    def __init__(
        self,
        settings: ClusterSettings,
        application_name: str = "pulse-web",
        max_size: int = POOL_SIZE,
    ) -> None:
        self.settings = settings
        self._pool: AsyncConnectionPool[Conn] = AsyncConnectionPool(
            conninfo(settings),
            kwargs=connect_kwargs(
                settings, application_name, statement_timeout_s=WEB_STATEMENT_TIMEOUT_S
            ),
            min_size=1,
            max_size=max_size,
            open=False,
            timeout=CONNECT_TIMEOUT_S,
        )

    async def open(self) -> None:
        await self._pool.open(wait=False)

    async def close(self) -> None:
        await self._pool.close()

    @asynccontextmanager
    async def store(
        self, scope: str | None = None, *, actor: str | None = None
    ) -> AsyncIterator[JobStore]:
        """A job store on a pooled connection; ``scope``: the only tenant it reaches;
        ``actor``: who the job revisions it writes name (an API token's name), unset again
        before the connection goes back to the pool."""
        try:
            async with self._pool.connection() as conn:
                store = JobStore(conn, self.settings, scope=scope)
                if actor is None:
                    yield store
                    return
                await store.revisions.act_as(actor, "api")
                try:
                    yield store
                finally:
                    try:
                        await store.revisions.act_as("", "")
                    except PulseError:  # never lend it to another token: the pool drops it
                        await conn.close()
        except PoolTimeout as exc:
            raise StoreError(
                f"cannot connect to Postgres at {mask_url(self.settings.database_url)}"
            ) from exc
        except psycopg.Error as exc:
            raise StoreError(describe(exc)) from exc
