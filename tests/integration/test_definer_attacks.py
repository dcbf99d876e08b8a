"""A database login of the web role against the functions that run as the schema's owner
(docs/security.md#database-roles): every definer searches the schema before ``pg_temp``, so a
temporary ``job_revisions`` never takes a revision nor fires a trigger as the owner; the
roles make no temporary tables at all; the web may stamp a token's last use and nothing
else of it."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import psycopg
import pytest
from psycopg import sql

from cluster.jobs.spec import JobSpec
from cluster.settings import ClusterSettings
from cluster.store.jobstore.store import JobStore
from tests.helpers.roles import Logins, grant_roles, refused

DENIED = "InsufficientPrivilege"
HANDLER = "cluster.chaos.witness:record"


async def test_every_definer_function_searches_pg_temp_last(store: JobStore) -> None:
    cur = await store.db.conn.execute(
        "SELECT p.oid::regprocedure::text AS name, p.proconfig FROM pg_proc p"
        " WHERE p.pronamespace = current_schema()::regnamespace AND p.prosecdef"
    )
    definers = {row["name"]: row["proconfig"] or [] for row in await cur.fetchall()}
    assert "job_revision_updated()" in definers and "watch_record" in str(definers)
    schema = store.settings.schema
    for name, config in definers.items():
        paths = [c.removeprefix("search_path=") for c in config if c.startswith("search_path=")]
        assert paths, f"{name} runs as the owner with the caller's search_path"
        assert paths[0].replace('"', "").split(", ") == [schema, "pg_temp"], (name, paths)


def _db(url: str) -> str:
    return url.rpartition("/")[2].split("?")[0]


async def test_the_roles_make_no_temporary_table(
    settings: ClusterSettings, store: JobStore, logins: Logins
) -> None:
    await asyncio.to_thread(grant_roles, settings, logins)
    for url in (logins.as_web(settings).database_url, logins.as_node(settings).database_url):
        found = await asyncio.to_thread(
            refused, url, settings.schema, "CREATE TEMP TABLE job_revisions (x int)"
        )
        assert found == DENIED


@pytest.fixture
def temporary_granted(settings: ClusterSettings, logins: Logins) -> Iterator[None]:
    """The web login allowed temporary tables again, as a database an operator shares with
    an application that needs them may have it; taken back at the end."""
    grant_roles(settings, logins)
    db = sql.Identifier(_db(settings.database_url))
    user = sql.Identifier(logins.web_user)
    with psycopg.connect(settings.database_url, autocommit=True) as conn:
        conn.execute(sql.SQL("GRANT TEMPORARY ON DATABASE {} TO {}").format(db, user))
    yield
    with psycopg.connect(settings.database_url, autocommit=True) as conn:
        conn.execute(sql.SQL("REVOKE TEMPORARY ON DATABASE {} FROM {}").format(db, user))


HIJACK = """
CREATE TEMP TABLE job_revisions (LIKE {schema}.job_revisions INCLUDING DEFAULTS);
CREATE TEMP TABLE witness (who text);
CREATE FUNCTION pg_temp.capture() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO pg_temp.witness VALUES (current_user);
    RETURN NULL;
END $$;
CREATE TRIGGER capture AFTER INSERT OR UPDATE ON pg_temp.job_revisions
FOR EACH ROW EXECUTE FUNCTION pg_temp.capture();
UPDATE {schema}.jobs SET timeout_s = 7 WHERE name = 'rollup';
"""


async def test_a_temporary_job_revisions_table_takes_no_revision_and_runs_nothing_as_owner(
    settings: ClusterSettings, store: JobStore, logins: Logins, temporary_granted: None
) -> None:
    await store.definitions.add(JobSpec.build("rollup", "@hourly", HANDLER))
    schema = settings.schema

    def attack() -> tuple[list[str], int]:
        with psycopg.connect(logins.as_web(settings).database_url, autocommit=True) as conn:
            conn.execute(sql.SQL("SET search_path TO {}").format(sql.Identifier(schema)))
            conn.execute(HIJACK.format(schema=schema).encode())
            ran = [who for (who,) in conn.execute("SELECT who FROM pg_temp.witness")]
            (taken,) = conn.execute("SELECT count(*) FROM pg_temp.job_revisions").fetchone() or (0,)
        return ran, int(taken)

    ran, taken = await asyncio.to_thread(attack)
    assert ran == [] and taken == 0, f"the trigger ran as {ran}; {taken} revisions taken"
    newest = (await store.revisions.history("rollup", "default"))[0]
    assert newest.change == "updated" and newest.diff["timeout_s"][1] == 7


async def test_the_web_login_stamps_a_tokens_last_use_and_rewrites_nothing_else(
    settings: ClusterSettings, store: JobStore, logins: Logins
) -> None:
    await asyncio.to_thread(grant_roles, settings, logins)
    await store.access.create_token("ci", "read", b"\x01" * 32, tenant="acme")
    url, schema = logins.as_web(settings).database_url, settings.schema
    for statement in (
        "UPDATE api_tokens SET role = 'admin'",
        "UPDATE api_tokens SET tenant_id = NULL",
        "UPDATE api_tokens SET expires_at = NULL",
        "UPDATE api_tokens SET hash = '\\x00'",
        "UPDATE api_tokens SET revoked_at = NULL",
    ):
        assert await asyncio.to_thread(refused, url, schema, statement) == DENIED, statement
    async with JobStore.open(logins.as_web(settings)) as as_web:
        found = await as_web.access.authenticate(b"\x01" * 32)
    assert found is not None and (found.role, found.tenant) == ("read", "acme")
    [token] = await store.access.tokens()
    assert token.last_used_at is not None
