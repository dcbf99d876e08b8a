"""A connection beside the hot path: a node's upkeep (``<node id>/upkeep``: the config
cache, pruning, backfills, the gate pass and alerts, one statement or transaction at a
time), an admin command's prune, or a tool's (the chaos harness's lock sampler).

It is never the lock session or the result writer, so its work never waits behind a claim
or a completion, nor they behind it. It opens on first use, and again after an error that
broke it. Each statement, and each transaction as a whole, has a deadline a little after
the server's ``statement_timeout`` (``cluster.store.deadline``): a server or network that
stops answering is noticed then, and the connection closed. Errors are ``StoreError``
naming the statement. Retries and their backoff are the caller's (``node.service``).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextlib import asynccontextmanager
from functools import partial
from typing import Any

import psycopg

from cluster.errors import StoreError
from cluster.settings import ClusterSettings
from cluster.store import tally
from cluster.store.connect import Conn, Row, connect
from cluster.store.deadline import MARGIN_S, Deadline
from cluster.store.queries import query, store_error

__all__ = ["Fetch", "SideConnection"]

# Runs the named statement with these parameters; its rows (none for a statement without).
Fetch = Callable[[str, dict[str, Any]], Awaitable[list[Row]]]

CLOSE_TIMEOUT_S = 2.0


class SideConnection:
    """``setup``: a statement run on each new connection before any other."""

    def __init__(
        self,
        settings: ClusterSettings,
        application_name: str,
        *,
        statement_timeout_s: float,
        setup: str | None = None,
    ) -> None:
        self.settings = settings
        self.name = application_name
        self._timeout_s = statement_timeout_s
        self._deadline_s = statement_timeout_s + MARGIN_S
        self._setup = setup
        self._conn: Conn | None = None
        # One user at a time: a statement never lands in another's transaction, and two
        # first uses open one connection.
        self._lock = asyncio.Lock()

    @asynccontextmanager
    async def using(self) -> AsyncIterator[SideConnection]:
        """This connection, closed when the block ends."""
        try:
            yield self
        finally:
            await self.close()

    async def fetch(self, name: str, params: Mapping[str, Any] | None = None) -> list[Row]:
        """The rows of statement ``name``, run on its own (autocommit)."""
        async with self._lock, self._errors(name):
            conn = await self._connected()
            tally.count(tally.role(self.name), name)
            async with Deadline(conn, self._deadline_s):
                return await _rows(conn, name, params or {})

    @asynccontextmanager
    async def transaction(self, name: str) -> AsyncIterator[Fetch]:
        """A block of statements in one transaction, under one deadline (``name`` says what
        ran out of time): the block runs them with the ``Fetch`` it is given."""
        async with self._lock, self._errors(name):
            conn = await self._connected()
            tally.count(tally.role(self.name), name)
            async with Deadline(conn, self._deadline_s), conn.transaction():
                yield partial(_translated, conn)

    async def close(self) -> None:
        """Close the connection once its current user is done (a node's services share
        one: ``node/parts.py``); the next use opens it again."""
        async with self._lock:
            await self._drop()

    async def _drop(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None and not conn.closed:
            with contextlib.suppress(TimeoutError, psycopg.Error, OSError):
                await asyncio.wait_for(conn.close(), CLOSE_TIMEOUT_S)

    async def _connected(self) -> Conn:
        if self._conn is not None and not self._conn.closed:
            return self._conn
        conn = await asyncio.wait_for(
            connect(self.settings, self.name, statement_timeout_s=self._timeout_s),
            self._deadline_s,
        )
        try:
            if self._setup is not None:
                async with Deadline(conn, self._deadline_s):
                    await conn.execute(query(self._setup))
        except BaseException:
            await conn.close()
            raise
        self._conn = conn
        return conn

    @asynccontextmanager
    async def _errors(self, name: str) -> AsyncIterator[None]:
        """Driver errors as ``StoreError``; the connection closed if they broke it."""
        try:
            yield
        except TimeoutError as exc:
            await self._drop()
            raise StoreError(f"{name}: no answer within {self._timeout_s:g}s") from exc
        except OSError as exc:
            await self._drop()
            raise StoreError(f"{name}: {exc}") from exc
        except (psycopg.Error, StoreError) as exc:
            if self._conn is not None and (self._conn.closed or self._conn.broken):
                await self._drop()
            if isinstance(exc, psycopg.Error):
                raise store_error(exc, name) from exc
            raise


async def _rows(conn: Conn, name: str, params: Mapping[str, Any]) -> list[Row]:
    cur = await conn.execute(query(name), params)
    return await cur.fetchall() if cur.description is not None else []


async def _translated(conn: Conn, name: str, params: dict[str, Any]) -> list[Row]:
    """``_rows`` in a transaction: a driver error names its statement."""
    try:
        return await _rows(conn, name, params)
    except psycopg.Error as exc:
        raise store_error(exc, name) from exc
