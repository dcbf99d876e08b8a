"""The result writer: a node's second connection, for completions only.

Completions are fenced by their lease token, so they need not travel on the lock session;
writing them here lets claims and completions proceed side by side instead of queueing
on one connection. The connection holds no locks and has no idle timeout; it is opened on
first use and again after any error, and psycopg prepares its one statement on the server
(docs/design/driver.md). Its name is ``<node id>/write`` so it never counts as the node's
lock session.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Sequence
from datetime import datetime
from typing import Any, Protocol
from uuid import UUID

import psycopg
from psycopg import AsyncCursor
from psycopg.rows import TupleRow, tuple_row

from cluster.errors import StoreError
from cluster.settings import ClusterSettings
from cluster.store.connect import connect, describe
from cluster.store.deadline import MARGIN_S, fetch_within
from cluster.store.queries import query
from cluster.store.records import (
    Completion,
    Skip,
    complete_params,
    finished_one_offs,
    flight_params,
    spawn_params,
)


class Host(Protocol):
    """What the completion statements use of their host."""

    node_id: str
    zone: str

    async def _run(self: Host, name: str, params: dict[str, Any]) -> list[Any]: ...


class CompletionStatements:
    """The statements that write run outcomes. A mix-in of ``ResultWriter``, and of
    ``LockSession`` too, so tests can hand the completer a lock session as its sink."""

    async def complete(
        self: Host,
        done: Sequence[Completion],
        skips: Sequence[Skip] = (),
        now: datetime | None = None,
    ) -> set[UUID]:
        """Apply completions; returns the ids applied (the rest were fenced)."""
        if not done:
            return set()
        rows = await self._run(
            "complete", complete_params(done, skips, self.node_id, self.zone, now)
        )
        applied = {row[0] for row in rows}
        finished = finished_one_offs(done, applied)
        if finished:  # rare: a one-off job is done; remove it if it asked to be
            await self._run("remove_done_jobs", {"ids": finished})
        return applied

    async def complete_flights(
        self: Host, done: Sequence[Completion], now: datetime | None = None
    ) -> set[tuple[UUID, datetime]]:
        """Apply flight completions; returns the (job id, slot) pairs applied."""
        if not done:
            return set()
        rows = await self._run(
            "complete_flights", flight_params(done, self.node_id, self.zone, now)
        )
        return {(row[0], row[1]) for row in rows}

    async def spawn(
        self: Host,
        spawns: Sequence[Completion],
        skips: Sequence[Skip],
        lease_s: float,
        now: datetime | None = None,
    ) -> dict[UUID, bool]:
        """Hand claimed `allow` slots to flights; each job moved, and whether it had room."""
        if not spawns:
            return {}
        params = spawn_params(spawns, skips, self.node_id, self.zone, lease_s, now)
        return {row[0]: row[1] for row in await self._run("spawn", params)}


class ResultWriter(CompletionStatements):
    def __init__(
        self, settings: ClusterSettings, node_id: str, zone: str, *, statement_timeout_s: float
    ) -> None:
        self._settings = settings
        self.node_id = node_id
        self.zone = zone
        self._timeout_s = statement_timeout_s
        self._cur: AsyncCursor[TupleRow] | None = None
        self._lock = asyncio.Lock()

    async def _run(self, name: str, params: dict[str, Any]) -> list[TupleRow]:
        async with self._lock:
            deadline = time.monotonic() + self._timeout_s + MARGIN_S
            try:
                if self._cur is None or self._cur.connection.closed:
                    conn = await asyncio.wait_for(
                        connect(
                            self._settings,
                            f"{self.node_id}/write"[:63],
                            statement_timeout_s=self._timeout_s,
                            prepare_threshold=0,
                        ),
                        deadline - time.monotonic(),
                    )
                    self._cur = conn.cursor(row_factory=tuple_row)
                left_s = deadline - time.monotonic()
                return await fetch_within(self._cur, query(name), params, left_s)
            except (TimeoutError, psycopg.Error, StoreError) as exc:
                await self.close()
                reason = "no answer in time" if isinstance(exc, TimeoutError) else describe(exc)
                raise StoreError(f"{name}: {reason}") from exc

    async def close(self) -> None:
        cur, self._cur = self._cur, None
        if cur is not None and not cur.connection.closed:
            with contextlib.suppress(TimeoutError, psycopg.Error, OSError):
                await asyncio.wait_for(cur.connection.close(), 2.0)
