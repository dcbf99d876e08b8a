"""Handler transactions committed with their run's completion (``ctx.transaction()``).

A handler writes its effects on a connection opened here, in a transaction left open when
its block ends. When the run succeeds, the node runs the fenced ``complete`` statement in
that same transaction and commits only if the completion applied: a run whose lease was
taken over (a zombie node waking up) writes nothing, so a slot's effects commit exactly
once even though execution is at least once (docs/design/effects.md,
tests/integration/test_effects.py). Pulse's statement runs on the cluster's schema; the
handler's connection keeps ``public`` on its ``search_path`` for the user's tables.

With a handler role (``pulse node --handler-role``), the handler's statements run under
``SET LOCAL ROLE`` to it, a role with no right on Pulse's tables, and the node takes its own
role back for the completion. A guard against a handler's mistakes, not a sandbox: code in
the node's process can ``RESET ROLE`` (docs/security.md). Pulse's statement names its
schema with ``pg_temp`` last, so a temporary table of the handler never stands in for one
of Pulse's.
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from typing import Any

import psycopg
from psycopg import sql

from cluster.errors import StoreError
from cluster.settings import ClusterSettings
from cluster.store.connect import Conn, Row, connect, connect_sync, describe
from cluster.store.lock.records import Completion, Skip, complete_params, flight_params
from cluster.store.queries import query

SyncConn = psycopg.Connection[Row]
_AS_NODE = sql.SQL("RESET ROLE")  # whatever role the handler left set


class EffectsStore:
    """Opens handler transactions and commits them with a run's completion."""

    def __init__(
        self, settings: ClusterSettings, node_id: str, zone: str, handler_role: str | None = None
    ) -> None:
        self._settings = settings
        self.node_id = node_id
        self.zone = zone
        self._name = f"{node_id}/effects"[:63]
        # SET LOCAL: Pulse's statement runs on its schema, as the node, until the commit.
        self._on_schema = sql.SQL("SET LOCAL search_path TO {}, pg_temp").format(
            sql.Identifier(settings.schema)
        )
        self._as_handler = (
            sql.SQL("SET LOCAL ROLE {}").format(sql.Identifier(handler_role))
            if handler_role
            else None
        )

    async def open(self, timeout_s: float) -> Conn:
        """A connection in a transaction (the first statement begins it), as the handler
        role if there is one."""
        conn = await connect(
            self._settings, self._name, statement_timeout_s=timeout_s, autocommit=False
        )
        if self._as_handler is not None:
            try:
                await conn.execute(self._as_handler)
            except psycopg.Error as exc:
                await close(conn)
                raise StoreError(f"run transaction: {describe(exc)}") from exc
        return conn

    def open_sync(self, timeout_s: float) -> SyncConn:
        conn = connect_sync(self._settings, self._name, statement_timeout_s=timeout_s)
        if self._as_handler is not None:
            try:
                conn.execute(self._as_handler)
            except psycopg.Error as exc:
                close_sync(conn)
                raise StoreError(f"run transaction: {describe(exc)}") from exc
        return conn

    def _statement(
        self, done: Completion, skips: Sequence[Skip], flight: bool
    ) -> tuple[bytes, dict[str, Any]]:
        """The fenced completion of the run: of its job's claim, or of its flight."""
        if flight:
            return query("complete_flights"), flight_params([done], self.node_id, self.zone, None)
        return query("complete"), complete_params([done], skips, self.node_id, self.zone, None)

    async def commit(
        self, conn: Conn, done: Completion, skips: Sequence[Skip], flight: bool = False
    ) -> bool:
        """Complete the run in the handler's transaction: commit when the completion
        applied (True), roll everything back when it was fenced (False). ``StoreError``
        when the database failed: then nothing committed, or, if the commit itself broke,
        possibly everything (the run's completion is fenced either way)."""
        try:
            async with conn.cursor() as cur:
                await cur.execute(_AS_NODE)
                await cur.execute(self._on_schema)
                await cur.execute(*self._statement(done, skips, flight))
                applied = bool(await cur.fetchall())
            if applied:
                await conn.commit()
            else:
                await conn.rollback()
            return applied
        except psycopg.Error as exc:
            raise StoreError(f"run transaction: {describe(exc)}") from exc
        finally:
            await close(conn)

    def commit_sync(
        self, conn: SyncConn, done: Completion, skips: Sequence[Skip], flight: bool = False
    ) -> bool:
        """``commit`` for a sync handler's connection (call it on a thread)."""
        try:
            with conn.cursor() as cur:
                cur.execute(_AS_NODE)
                cur.execute(self._on_schema)
                cur.execute(*self._statement(done, skips, flight))
                applied = bool(cur.fetchall())
            if applied:
                conn.commit()
            else:
                conn.rollback()
            return applied
        except psycopg.Error as exc:
            raise StoreError(f"run transaction: {describe(exc)}") from exc
        finally:
            close_sync(conn)


async def close(conn: Conn) -> None:
    """Close, rolling back whatever is uncommitted; errors are moot by then."""
    with contextlib.suppress(psycopg.Error, OSError):
        await conn.close()


def close_sync(conn: SyncConn) -> None:
    with contextlib.suppress(psycopg.Error, OSError):
        conn.close()
