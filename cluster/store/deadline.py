"""Statements with a deadline, for the node's own connections (lock session, result writer,
side connections).

A statement cancelled inside psycopg is first cancelled on the server and waited for, which
takes seconds when the server or the network no longer answers. At the deadline the
connection is closed first, so the caller hears of it at once (test_session.py).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping
from types import TracebackType
from typing import Any, TypeVar

from psycopg import AsyncCursor

from cluster.store.connect import Conn

__all__ = ["MARGIN_S", "Deadline", "Statement", "fetch_within"]

R = TypeVar("R")

# Runs a named statement with its parameters on one connection of the node, within its
# deadline, and returns the rows: what the parts of that connection are built with.
Statement = Callable[[str, dict[str, Any]], Awaitable[list[Any]]]

# How long after its statement_timeout a statement's deadline falls: the server's own
# timeout answers first, the deadline is for a server or network that no longer answers.
MARGIN_S = 1.0


async def fetch_within(
    cur: AsyncCursor[R], sql: bytes, params: Mapping[str, Any], timeout_s: float
) -> list[R]:
    """The rows of ``sql`` (it must return rows), run on ``cur``; ``TimeoutError`` after
    ``timeout_s`` with the cursor's connection closed. Driver errors pass through."""
    async with Deadline(cur.connection, timeout_s):
        await cur.execute(sql, params)
        return await cur.fetchall()


class Deadline:
    """``asyncio.timeout`` for a statement on ``conn``, except that when time is up ``conn``
    is closed before the task is cancelled: psycopg then has no statement left to cancel on
    the server, and the task ends at once. ``TimeoutError`` when time was up."""

    def __init__(self, conn: Conn, timeout_s: float) -> None:
        self._conn = conn
        self._timeout_s = timeout_s
        self._task: asyncio.Task[Any] | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._closing: asyncio.Task[None] | None = None

    async def __aenter__(self) -> None:
        self._task = asyncio.current_task()
        self._timer = asyncio.get_running_loop().call_later(self._timeout_s, self._expire)

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        assert self._task is not None and self._timer is not None
        self._timer.cancel()
        if self._closing is None:
            return
        if self._task.uncancel() > 0:
            return  # cancelled by someone else too: that cancellation goes on
        raise TimeoutError from exc

    def _expire(self) -> None:
        assert self._task is not None
        # The close runs in a step of its own queued ahead of the task's wake-up, and
        # closes the socket before it yields: psycopg, woken by the cancellation, finds no
        # statement in flight (tests/integration/test_session.py: ..._at_its_deadline).
        self._closing = asyncio.ensure_future(self._conn.close())
        self._task.cancel()
