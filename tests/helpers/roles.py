"""Database roles for tests: ``pulse init --roles`` under names unique to the test session
(roles are cluster-wide in Postgres, so parallel runs must not share them), a login user
in each, and their removal at the end, grants and all."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import secrets
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import psycopg
from psycopg import sql

from cluster.local.logins import login_names
from cluster.settings import ClusterSettings
from cluster.store.jobstore.store import JobStore
from cluster.store.schema.roles import RoleNames, create_roles
from tests.helpers.databases import ADMIN_URL

PASSWORD = "test-only-" + secrets.token_hex(8)


def login_url(url: str, user: str) -> str:
    """``url`` logging in as ``user`` (the test password)."""
    parts = urlsplit(url)
    host = parts.netloc.rpartition("@")[2]
    return urlunsplit(parts._replace(netloc=f"{user}:{PASSWORD}@{host}"))


@dataclass(frozen=True)
class Logins:
    """The group roles of one test session and a login user in each."""

    names: RoleNames
    node_user: str
    web_user: str

    def as_node(self, settings: ClusterSettings) -> ClusterSettings:
        return dataclasses.replace(
            settings, database_url=login_url(settings.database_url, self.node_user)
        )

    def as_web(self, settings: ClusterSettings) -> ClusterSettings:
        return dataclasses.replace(
            settings, database_url=login_url(settings.database_url, self.web_user)
        )


def grant_roles(settings: ClusterSettings, logins: Logins) -> list[str]:
    """``pulse init --roles`` on the schema of ``settings`` (initialised already), then the
    login users if they are not there yet; the roles ``init`` made."""

    async def go() -> list[str]:
        async with JobStore.open(settings) as store:
            return await create_roles(store.db.conn, settings.schema, logins.names)

    made = asyncio.run(go())
    pairs = (logins.node_user, logins.names.node), (logins.web_user, logins.names.web)
    with psycopg.connect(ADMIN_URL, autocommit=True) as conn:
        for user, group in pairs:
            if not conn.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", (user,)).fetchone():
                conn.execute(
                    sql.SQL("CREATE ROLE {} LOGIN PASSWORD {} IN ROLE {}").format(
                        sql.Identifier(user), sql.Literal(PASSWORD), sql.Identifier(group)
                    )
                )
    return made


@contextlib.contextmanager
def session_logins(database_url: str) -> Iterator[Logins]:
    """Role names for this session (made by ``grant_roles``); at the end every grant they
    hold in ``database_url``'s database goes, then the roles."""
    tag = secrets.token_hex(4)
    names = RoleNames(f"pulse_node_{tag}", f"pulse_web_{tag}", f"pulse_handler_{tag}")
    logins = Logins(names, f"{names.node}_login", f"{names.web}_login")
    try:
        yield logins
    finally:
        with psycopg.connect(ADMIN_URL, autocommit=True) as conn:
            every = [names.node, names.web, names.handler, logins.node_user, logins.web_user]
            every += login_names(names)  # pulse up --roles
            found = [
                r
                for (r,) in conn.execute(
                    "SELECT rolname FROM pg_roles WHERE rolname = ANY(%s)", (every,)
                )
            ]
        if found:
            idents = sql.SQL(", ").join(sql.Identifier(r) for r in found)
            with psycopg.connect(database_url, autocommit=True) as conn:
                conn.execute(sql.SQL("DROP OWNED BY {}").format(idents))
            with psycopg.connect(ADMIN_URL, autocommit=True) as conn:
                conn.execute(sql.SQL("DROP OWNED BY {}").format(idents))
                for role in found:
                    conn.execute(sql.SQL("DROP ROLE {}").format(sql.Identifier(role)))


def refused(url: str, schema: str, statement: str, params: Any = None) -> str:
    """Run ``statement`` as the login of ``url``; the error's SQLSTATE name, '' if it ran."""
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(sql.SQL("SET search_path TO {}").format(sql.Identifier(schema)))
        try:
            conn.execute(statement.encode(), params)
        except psycopg.Error as exc:
            return type(exc).__name__
    return ""
