"""Opening Postgres connections the way every part of Pulse needs them.

Each connection carries ``application_name`` (the node id, so ``pg_locks`` and
``pg_stat_activity`` show who holds what), the cluster's schema on its ``search_path``, a
connect timeout and a statement timeout. Sessions run in UTC whatever the server's
``TimeZone``: Pulse's times print the same everywhere, and psycopg decodes them into
``datetime.timezone.utc``, cheaper than a named zone. Job time zones are applied in Python,
never by the session. Driver errors become ``StoreError`` here.

A URL with a host list (a primary and its standbys) connects only to the server that
accepts writes unless it says otherwise (``target_session_attrs=read-write`` by default):
every Pulse connection writes, so after a failover a reconnect finds the new primary
(docs/design/failover.md).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any, TypedDict, Unpack

import psycopg
from psycopg.conninfo import make_conninfo
from psycopg.rows import dict_row

from cluster.errors import StoreError
from cluster.settings import ClusterSettings, mask_url
from cluster.urls import is_multi_host

CONNECT_TIMEOUT_S = 5
ADMIN_STATEMENT_TIMEOUT_S = 30.0  # admin commands and tools, unless they say otherwise

Row = dict[str, Any]
Conn = psycopg.AsyncConnection[Row]


class SessionOptions(TypedDict, total=False):
    """The keyword options of ``connect``; ``connect_kwargs`` holds their defaults."""

    statement_timeout_s: float
    idle_session_timeout_s: float | None
    autocommit: bool
    prepare_threshold: int | None


async def connect(
    settings: ClusterSettings, application_name: str, **options: Unpack[SessionOptions]
) -> Conn:
    """A new dedicated connection (never pooled) with Pulse's session settings.

    By default psycopg prepares nothing on it, so it works behind any pooler. The node's
    lock session and result writer pass ``prepare_threshold=0``: they run the same few
    statements all day (docs/design/driver.md).
    """
    try:
        return await psycopg.AsyncConnection.connect(
            conninfo(settings), **connect_kwargs(settings, application_name, **options)
        )
    except psycopg.Error as exc:
        raise StoreError(cannot_connect(settings, exc)) from exc


def connect_sync(
    settings: ClusterSettings, application_name: str, *, statement_timeout_s: float
) -> psycopg.Connection[Row]:
    """A blocking connection with the same settings, in a transaction (not autocommit):
    for sync handlers' ``ctx.transaction()``, opened on their thread."""
    try:
        return psycopg.Connection.connect(
            conninfo(settings),
            **connect_kwargs(
                settings,
                application_name,
                statement_timeout_s=statement_timeout_s,
                autocommit=False,
            ),
        )
    except psycopg.Error as exc:
        raise StoreError(cannot_connect(settings, exc)) from exc


def conninfo(settings: ClusterSettings) -> str:
    """The URL, with ``target_session_attrs=read-write`` added to a host list that does not
    choose for itself."""
    url = settings.database_url
    if is_multi_host(url) and "target_session_attrs" not in url:
        return make_conninfo(url, target_session_attrs="read-write")
    return url


def cannot_connect(settings: ClusterSettings, exc: BaseException) -> str:
    return f"cannot connect to Postgres at {mask_url(settings.database_url)}: {_first_line(exc)}"


def connect_kwargs(
    settings: ClusterSettings,
    application_name: str,
    *,
    statement_timeout_s: float = ADMIN_STATEMENT_TIMEOUT_S,
    idle_session_timeout_s: float | None = None,
    autocommit: bool = True,
    prepare_threshold: int | None = None,
) -> dict[str, Any]:
    """The connection arguments of ``connect`` (a pool opens its connections with them)."""
    # jit off: Pulse runs short statements, and a cost estimate that crosses the JIT
    # threshold (a set-returning function over a small table can) would compile each
    # execution, hundreds of milliseconds of server CPU for a statement of one.
    options = f"-c search_path={settings.schema},public -c TimeZone=UTC -c jit=off"
    options += f" -c statement_timeout={int(statement_timeout_s * 1000)}"
    if idle_session_timeout_s is not None:
        options += f" -c idle_session_timeout={int(idle_session_timeout_s * 1000)}"
    return {
        "autocommit": autocommit,
        "row_factory": dict_row,
        "application_name": application_name[:63],
        "connect_timeout": CONNECT_TIMEOUT_S,
        "options": options,
        "prepare_threshold": prepare_threshold,
    }


@asynccontextmanager
async def connection(
    settings: ClusterSettings, application_name: str = "pulse-admin"
) -> AsyncIterator[Conn]:
    conn = await connect(settings, application_name)
    try:
        yield conn
    finally:
        await conn.close()


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip() or type(exc).__name__
    return text.splitlines()[0]


class SchemaMissing(StoreError):
    """The cluster's schema has no tables (or no shard count) yet: ``pulse init`` never ran."""

    def __init__(self) -> None:
        super().__init__("the schema is not initialised; run `pulse init` first")


def describe(exc: BaseException) -> str:
    """One line describing a driver error, for logs and CLI messages."""
    return _first_line(exc)
