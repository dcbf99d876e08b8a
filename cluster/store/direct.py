"""Prepared statements sent through libpq directly, for the connections a node uses every
second.

psycopg's async cursor runs a good deal of Python per round trip (query conversion,
prepared-statement bookkeeping, result handling, a generator driven by a waiting
coroutine): on the 2-core benchmark VM a prepared ``SELECT now()`` cost the client 85 µs of
CPU in a loop and 683 µs after a second asleep, against 47 µs and 350 µs with the same
libpq calls made from here. A node makes several such round trips a second whatever it
runs (the claim poll, the membership check, the recovery pass) and more per burst of runs
(claims and completions), so that difference is a large share of its CPU.

psycopg still owns the connection (it opens, configures and closes it), adapts the
parameters and loads the rows (its C ``Transformer``), and supplies the exception classes.
This module turns ``%(name)s`` placeholders into ``$n``, prepares each statement once per
connection and parameter types (the node's few statements run thousands of times on one
session, and parsing and planning the claim each time cost more than running it: about
2.4 of 3.3 ms when nothing is due; Postgres still plans the first executions for their
parameters and keeps a generic plan only where it is no costlier), sends it, waits for
the socket on the event loop and reads the result. A statement interrupted before its
result was read (a timeout, a cancelled task) leaves the connection unusable, so the
connection is closed at once.
"""

from __future__ import annotations

import asyncio
import functools
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import psycopg
from psycopg import errors, pq
from psycopg.adapt import PyFormat, Transformer

__all__ = ["DirectConnection", "RowMaker", "dict_rows", "placeholders", "tuple_rows"]

_PLACEHOLDER = re.compile(rb"%\((\w+)\)s")

RowMaker = Callable[[pq.abc.PGresult], Callable[[Sequence[Any]], Any]]


@functools.lru_cache(maxsize=256)
def placeholders(sql: bytes) -> tuple[bytes, tuple[str, ...]]:
    """``sql`` with its ``%(name)s`` placeholders numbered ``$1..$n`` (a name used twice
    gets one number), and the names in that order."""
    names: list[str] = []

    def number(match: re.Match[bytes]) -> bytes:
        name = match.group(1).decode()
        if name not in names:
            names.append(name)
        return b"$%d" % (names.index(name) + 1)

    return _PLACEHOLDER.sub(number, sql), tuple(names)


def tuple_rows(result: pq.abc.PGresult) -> Callable[[Sequence[Any]], Any]:
    return tuple


def dict_rows(result: pq.abc.PGresult) -> Callable[[Sequence[Any]], Any]:
    names = [(result.fname(i) or b"").decode() for i in range(result.nfields)]

    def make(values: Sequence[Any]) -> dict[str, Any]:
        return dict(zip(names, values, strict=True))

    return make


class DirectConnection:
    """Runs statements on an open psycopg async connection (autocommit, non-blocking), one
    at a time: the caller serialises them.

    psycopg must prepare nothing on that connection (``prepare_threshold=None``, as
    ``cluster.store.connect.connect`` opens them): after a rollback or a DROP it deallocates every
    prepared statement of the session, this module's too.
    """

    def __init__(self, conn: psycopg.AsyncConnection[Any]) -> None:
        if conn.prepare_threshold is not None:
            raise ValueError("psycopg prepares statements on this connection")
        self._conn = conn
        self._pg = conn.pgconn
        self._tx = Transformer(conn)
        self._encoding = conn.info.encoding
        self._prepared: dict[tuple[bytes, tuple[int, ...]], bytes] = {}
        self._loop = asyncio.get_running_loop()

    async def run(
        self, sql: bytes, params: Mapping[str, Any], rows: RowMaker = tuple_rows
    ) -> list[Any]:
        """The statement's rows (none for a statement that returns none)."""
        text, names = placeholders(sql)
        tx = self._tx
        values = tx.dump_sequence([params[n] for n in names], [PyFormat.AUTO] * len(names))
        key = (sql, tx.types or ())
        name = self._prepared.get(key)
        try:
            if name is None:
                name = f"pulse_{len(self._prepared)}".encode()
                self._pg.send_prepare(name, text, param_types=tx.types)
                self._check(await self._result())
                self._prepared[key] = name
            self._pg.send_query_prepared(name, values, param_formats=tx.formats)
            result = self._check(await self._result())
        except psycopg.DatabaseError:
            # The server refused the statement (the connection is fine), or the connection
            # broke (libpq has marked it bad already).
            raise
        except BaseException:
            self._pg.finish()  # mid-statement: nothing more can be sent on it
            raise
        if result.status != pq.ExecStatus.TUPLES_OK:
            return []
        tx.set_pgresult(result)
        return tx.load_rows(0, result.ntuples, rows(result))

    def _check(self, result: pq.abc.PGresult) -> pq.abc.PGresult:
        if result.status == pq.ExecStatus.FATAL_ERROR:
            raise errors.error_from_result(result, encoding=self._encoding)
        return result

    async def _result(self) -> pq.abc.PGresult:
        """Send what is buffered, then read until the statement's result is complete."""
        pg = self._pg
        while pg.flush():
            await self._socket(writable=True)
        found: pq.abc.PGresult | None = None
        while True:
            if pg.is_busy():
                await self._socket(writable=False)
                pg.consume_input()
                continue
            result = pg.get_result()
            if result is None:
                break
            if found is None or result.status == pq.ExecStatus.FATAL_ERROR:
                found = result
        if found is None:
            raise psycopg.OperationalError("the server sent no result")
        return found

    async def _socket(self, *, writable: bool) -> None:
        fd = self._pg.socket
        ready = self._loop.create_future()

        def wake() -> None:
            if not ready.done():
                ready.set_result(None)

        if writable:
            self._loop.add_writer(fd, wake)
        else:
            self._loop.add_reader(fd, wake)
        try:
            await ready
        finally:
            if writable:
                self._loop.remove_writer(fd)
            else:
                self._loop.remove_reader(fd)
