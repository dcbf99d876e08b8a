"""``ctx.transaction()``: a handler's writes to Pulse's database, committed with its run.

The handler's block opens a transaction on its own connection (``cluster.store.lock.effects``)
and leaves it open when the block ends cleanly. The run's outcome decides: a success is
completed inside that transaction by the completer, which commits only if the completion
passes its fence; any other outcome rolls the effects back (a retry writes them again). A
block that raises rolls back at once. One transaction per run; a run reported before its
block ended (timed out, cancelled, abandoned) has its transaction rolled back when the
block ends. Everything here runs on the event loop except the sync handler's ``with``,
which runs on the handler's thread, hence the lock.
"""

from __future__ import annotations

import asyncio
import threading
from dataclasses import dataclass
from datetime import datetime
from types import TracebackType
from typing import Protocol
from uuid import UUID

from cluster.store.connect import Conn
from cluster.store.lock.effects import EffectsStore, SyncConn, close, close_sync


class RunIdentity(Protocol):
    """What a transaction needs to know of its run (a ``node.handlers.context.RunContext``)."""

    @property
    def job_id(self) -> UUID: ...
    @property
    def scheduled_for(self) -> datetime: ...
    @property
    def fencing_token(self) -> int: ...
    @property
    def timeout_s(self) -> float: ...
    @property
    def reported(self) -> bool: ...


Key = tuple[UUID, datetime, int]  # job id, slot, lease token: one run


@dataclass
class Pending:
    """A run's transaction whose block ended cleanly: it waits for the run's outcome."""

    conn: Conn | None = None
    sync_conn: SyncConn | None = None

    async def rollback(self) -> None:
        if self.conn is not None:
            await close(self.conn)
        if self.sync_conn is not None:
            await asyncio.to_thread(close_sync, self.sync_conn)


class Effects:
    """The node's pending run transactions, by run."""

    def __init__(self, store: EffectsStore) -> None:
        self.store = store
        self._lock = threading.Lock()
        self._pending: dict[Key, Pending] = {}

    def transaction(self, ctx: RunIdentity) -> RunTransaction:
        return RunTransaction(self, ctx)

    def _park(self, key: Key, pending: Pending, ctx: RunIdentity) -> bool:
        """Keep a cleanly ended block's transaction for the run's outcome; False when the
        run was reported already (the caller rolls back)."""
        with self._lock:
            if ctx.reported:
                return False
            self._pending[key] = pending
            return True

    def take(self, job_id: UUID, slot: datetime, token: int) -> Pending | None:
        """The run's parked transaction, if any. The executor marks a run reported before
        this is called, so a block that ends later rolls back rather than park."""
        if not self._pending:  # most runs: no lock taken
            return None
        with self._lock:
            return self._pending.pop((job_id, slot, token), None)


class RunTransaction:
    """What ``ctx.transaction()`` returns: ``async with`` in async handlers, ``with`` in
    sync ones; either gives a psycopg connection inside a transaction."""

    def __init__(self, effects: Effects, ctx: RunIdentity) -> None:
        self._effects = effects
        self._key: Key = (ctx.job_id, ctx.scheduled_for, ctx.fencing_token)
        self._ctx = ctx
        self._timeout_s = ctx.timeout_s
        self._conn: Conn | None = None
        self._sync_conn: SyncConn | None = None

    async def __aenter__(self) -> Conn:
        self._conn = await self._effects.store.open(self._timeout_s)
        return self._conn

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        assert self._conn is not None
        parked = exc_type is None and self._effects._park(
            self._key, Pending(conn=self._conn), self._ctx
        )
        if not parked:
            await close(self._conn)  # closing an open transaction rolls it back

    def __enter__(self) -> SyncConn:
        self._sync_conn = self._effects.store.open_sync(self._timeout_s)
        return self._sync_conn

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        assert self._sync_conn is not None
        pending = Pending(sync_conn=self._sync_conn)
        if exc_type is not None or not self._effects._park(self._key, pending, self._ctx):
            close_sync(self._sync_conn)
