"""What the quota, audit and role attacks of tests/e2e/test_web_attacks.py share: tokens of
tenants of their own (so the module's shared ``pulse web`` serves other sections as
before), the allow-list widened for one test and put back, quotas set as the operator sets
them, a job row held locked to make requests slow, and the check that nothing secret
leaked."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator
from typing import Any

import psycopg

from cluster.store.jobstore.store import JobStore
from tests.helpers.web import Api, make_token

HANDLER = "cluster.chaos.witness:record"


def tenant_token(api: Api, name: str, role: str, tenant: str | None) -> str:
    """A token made as ``pulse tokens create`` makes one, remembered in ``api.tokens``."""
    secret = make_token(api.settings, name, role, tenant)
    api.tokens[name] = secret
    return secret


@contextlib.contextmanager
def allowing(api: Api, pattern: str) -> Iterator[None]:
    """``api.handlers`` with ``pattern`` added for the block, then as it was."""
    rows = api.sql("SELECT value FROM config WHERE key = 'api.handlers'")
    before = str(rows[0][0]) if rows else ""
    api.set_config("api.handlers", ",".join(p for p in (before, pattern) if p))
    try:
        yield
    finally:
        api.set_config("api.handlers", before)


def set_quota(api: Api, tenant: str, **caps: int | None) -> None:
    async def go() -> None:
        async with JobStore.open(api.settings) as store:
            await store.quotas.set(tenant, caps)

    asyncio.run(go())


def job(name: str, tenant: str, **extra: Any) -> dict[str, Any]:
    return {"name": name, "tenant": tenant, "schedule": "@hourly", "handler": HANDLER, **extra}


def count(api: Api, statement: str, *params: Any) -> int:
    return int(str(api.sql(statement, params)[0][0]))


@contextlib.contextmanager
def row_locked(api: Api, tenant: str, name: str) -> Iterator[None]:
    """The job's row locked by another session for the block: a change to it waits."""
    with psycopg.connect(api.settings.database_url) as conn:
        conn.execute(f"SET search_path TO {api.settings.schema}")
        found = conn.execute(
            "SELECT 1 FROM jobs WHERE tenant_id = %s AND name = %s FOR UPDATE", (tenant, name)
        ).fetchone()
        assert found is not None
        try:
            yield
        finally:
            conn.rollback()


def waiting_on_locks(api: Api) -> int:
    """``pulse web``'s connections waiting for a row lock now."""
    return count(
        api,
        "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'pulse-web'"
        " AND wait_event_type = 'Lock' AND datname = current_database()",
    )


def assert_no_secret(api: Api, *texts: str) -> None:
    """No token of the module in ``texts``, nor in the audit trail."""
    audit = " ".join(str(r) for r in api.sql("SELECT * FROM api_audit"))
    for secret in api.tokens.values():
        for text in (*texts, audit):
            assert secret not in text
