"""Statements sent through libpq directly (``cluster.store.direct``): parameters and rows as
psycopg would adapt them, one prepared statement per parameter types, server errors that
leave the connection usable, and an interrupted statement that closes it."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from uuid import UUID

import psycopg
import pytest

from cluster.settings import ClusterSettings
from cluster.store.connect import Conn, connect
from cluster.store.direct import DirectConnection, dict_rows, placeholders

ID = UUID("12345678-1234-5678-1234-567812345678")


@pytest.fixture
async def conn(settings: ClusterSettings) -> AsyncIterator[Conn]:
    c = await connect(settings, "direct-test", statement_timeout_s=5)
    yield c
    await c.close()


def test_placeholders_are_numbered_once_per_name() -> None:
    text, names = placeholders(b"SELECT %(a)s, %(b)s::int[], %(a)s -- %(c)s")
    assert text == b"SELECT $1, $2::int[], $1 -- $3"
    assert names == ("a", "b", "c")


async def test_parameters_and_rows_round_trip_as_psycopg_adapts_them(conn: Conn) -> None:
    direct = DirectConnection(conn)
    sql = (
        b"SELECT %(id)s::uuid AS id, %(n)s::bigint AS n, %(t)s::timestamptz AS t,"
        b" %(s)s::int[] AS s, %(x)s::float8 AS x, %(none)s::text AS none, %(n)s + 1 AS m"
    )
    at = datetime(2026, 1, 1, 12, tzinfo=UTC)
    params = {"id": ID, "n": 5, "t": at, "s": "{3,1}", "x": 1.5, "none": None}
    assert await direct.run(sql, params) == [(ID, 5, at, [3, 1], 1.5, None, 6)]
    big = {**params, "n": 2**40}  # another parameter type (int8, not int2): its own statement
    rows = await direct.run(sql, big, dict_rows)
    assert rows == [
        {"id": ID, "n": 2**40, "t": at, "s": [3, 1], "x": 1.5, "none": None, "m": 2**40 + 1}
    ]
    cur = await conn.execute(
        "SELECT count(*) FROM pg_prepared_statements WHERE name LIKE 'pulse_%'"
    )
    assert await cur.fetchone() == {"count": 2}
    assert await direct.run(sql, params) == [(ID, 5, at, [3, 1], 1.5, None, 6)]  # reused


async def test_a_connection_psycopg_prepares_on_is_refused(conn: Conn) -> None:
    # psycopg would deallocate every prepared statement after a rollback, ours too.
    conn.prepare_threshold = 5
    with pytest.raises(ValueError, match="psycopg prepares statements"):
        DirectConnection(conn)


async def test_a_statement_without_rows_returns_none(conn: Conn) -> None:
    direct = DirectConnection(conn)
    assert await direct.run(b"SET application_name = 'direct-test-2'", {}) == []
    assert await direct.run(b"SELECT 1 AS one WHERE false", {}) == []


async def test_a_refused_statement_raises_and_the_connection_goes_on(conn: Conn) -> None:
    direct = DirectConnection(conn)
    with pytest.raises(psycopg.errors.DivisionByZero):
        await direct.run(b"SELECT 1 / %(z)s::int AS x", {"z": 0})
    with pytest.raises(psycopg.errors.UndefinedTable):
        await direct.run(b"SELECT * FROM no_such_table_anywhere", {})
    assert await direct.run(b"SELECT 1 / %(z)s::int AS x", {"z": 1}) == [(1,)]
    assert not conn.closed


async def test_an_interrupted_statement_closes_the_connection(conn: Conn) -> None:
    direct = DirectConnection(conn)
    with pytest.raises(TimeoutError):
        async with asyncio.timeout(0.2):
            await direct.run(b"SELECT pg_sleep(3)", {})
    assert conn.closed


async def test_a_connection_ended_by_the_server_raises_operational_error(
    conn: Conn, settings: ClusterSettings
) -> None:
    direct = DirectConnection(conn)
    pid = conn.info.backend_pid
    async with await connect(settings, "direct-killer", statement_timeout_s=5) as other:
        await other.execute("SELECT pg_terminate_backend(%s)", (pid,))
    with pytest.raises(psycopg.OperationalError):
        await direct.run(b"SELECT 1 AS one", {})
    assert conn.closed
