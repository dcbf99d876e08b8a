"""The result writer: a node's second connection, for completions only, which it runs as
its ``completions`` part (``cluster.store.lock.completions``).

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
from typing import Any

import psycopg
from psycopg import AsyncCursor
from psycopg.rows import TupleRow, tuple_row

from cluster.errors import StoreError
from cluster.settings import ClusterSettings
from cluster.store import tally
from cluster.store.connect import connect, describe
from cluster.store.deadline import MARGIN_S, fetch_within
from cluster.store.lock.completions import Completions
from cluster.store.queries import query


class ResultWriter:
    def __init__(
        self, settings: ClusterSettings, node_id: str, zone: str, *, statement_timeout_s: float
    ) -> None:
        self._settings = settings
        self.node_id = node_id
        self.zone = zone
        self._timeout_s = statement_timeout_s
        self._cur: AsyncCursor[TupleRow] | None = None
        self._lock = asyncio.Lock()
        self.completions = Completions(self._run, node_id, zone)

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
                tally.count("write", name)
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
