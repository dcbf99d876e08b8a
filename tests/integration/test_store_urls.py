"""Store URLs through the real CLI: host lists reach the server that answers, and URLs with
an unknown scheme or no host are bad input (exit 2, one line, nothing written)."""

from __future__ import annotations

import secrets

import psycopg
import pytest

from cluster.local.processes import free_port
from cluster.settings import ClusterSettings
from cluster.store.jobstore.store import JobStore
from cluster.store.lock.session import LockSession, SessionLost
from tests.helpers.cli import invoke
from tests.helpers.databases import REDIS_URL

ADD = ("jobs", "add", "tick", "--schedule", "*/5 * * * *", "--handler", "app.jobs:tick")


def schema_exists(database_url: str, schema: str) -> bool:
    with psycopg.connect(database_url) as conn:
        found = conn.execute("SELECT 1 FROM pg_namespace WHERE nspname = %s", [schema])
        return found.fetchone() is not None


def with_hosts(database_url: str, hosts: str) -> str:
    """``database_url`` (postgresql://user@host:port/db) with its hosts replaced."""
    scheme, _, rest = database_url.partition("://")
    user, _, location = rest.rpartition("@")
    _, _, path = location.partition("/")
    return f"{scheme}://{user}{'@' if user else ''}{hosts}/{path}"


@pytest.mark.parametrize(
    ("variable", "url", "field"),
    [
        ("PULSE_DATABASE_URL", "mysql://root@127.0.0.1:3306/pulse", "database_url"),
        ("PULSE_DATABASE_URL", "postgresql:///pulse", "database_url"),
        ("PULSE_DATABASE_URL", "postgresql://u:pw@,/pulse", "database_url"),
        ("PULSE_REDIS_URL", "memcached://127.0.0.1:11211", "redis_url"),
        ("PULSE_REDIS_URL", "redis+sentinel:///main", "redis_url"),
        ("PULSE_REDIS_URL", "redis+sentinel://,/main", "redis_url"),
    ],
)
def test_bad_store_urls_are_refused_before_anything_is_written(
    settings: ClusterSettings, variable: str, url: str, field: str
) -> None:
    result = invoke(settings, "init", **{variable: url})
    assert result.exit_code == 2, result.output
    assert result.stdout == ""
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"pulse: invalid {field}"), result.stderr
    assert "pw" not in result.stderr
    assert not schema_exists(settings.database_url, settings.schema)


def test_a_host_list_reaches_the_server_that_answers(settings: ClusterSettings) -> None:
    # The first host refuses connections (nothing listens there); libpq moves on.
    here = settings.database_url.partition("@")[2].partition("/")[0]
    multi = with_hosts(settings.database_url, f"127.0.0.1:{free_port()},{here}")
    assert invoke(settings, "init", "--shards", "8", PULSE_DATABASE_URL=multi).exit_code == 0
    added = invoke(settings, *ADD, PULSE_DATABASE_URL=multi)
    assert added.exit_code == 0, added.output
    assert schema_exists(settings.database_url, settings.schema)


def test_a_host_list_that_answers_nowhere_fails_on_one_masked_line(
    settings: ClusterSettings,
) -> None:
    secret = secrets.token_hex(4)
    dead = f"127.0.0.1:{free_port()},127.0.0.1:{free_port()}"
    url = with_hosts(f"postgresql://pulse:{secret}@x/pulse", dead)
    result = invoke(settings, "jobs", "list", PULSE_DATABASE_URL=url, PULSE_REDIS_URL=REDIS_URL)
    assert result.exit_code == 1, result.output
    assert len(result.stderr.splitlines()) == 1, result.stderr
    assert secret not in result.stderr and "pulse:***@127.0.0.1" in result.stderr


async def test_a_read_only_server_ends_the_lock_session(
    store: JobStore, settings: ClusterSettings
) -> None:
    """What pg_auto_failover does to a primary it demotes (``default_transaction_read_only``
    on, then a restart as a standby): a write refused as read-only drops the session and
    its shards, like a lost connection, so the node reconnects to the new primary."""
    database = settings.database_url.rpartition("/")[2]
    lost: list[bool] = []
    with psycopg.connect(settings.database_url, autocommit=True) as admin:
        admin.execute(f'ALTER DATABASE "{database}" SET default_transaction_read_only = on')
        try:
            session = LockSession(
                settings, "ro", "z", session_timeout_s=10, statement_timeout_s=5,
                on_lost=lambda: lost.append(True),
            )  # fmt: skip
            await session.open()  # advisory locks work on a read-only server, and a standby
        finally:
            admin.execute(f'ALTER DATABASE "{database}" RESET default_transaction_read_only')
    try:
        assert await session.try_lock([1, 2]) == {1, 2}
        with pytest.raises(SessionLost, match="read-only"):
            await session.claim([1, 2], limit=10, lease_s=30)
        assert lost == [True] and not session.connected
        await session.open()  # a new connection: writable again
        assert (await session.claim([1, 2], limit=10, lease_s=30)).jobs == []
    finally:
        await session.close()


@pytest.mark.parametrize(
    ("variable", "url", "field"),
    [
        ("PULSE_DATABASE_URL", "postgresql://postgres@127.0.0.1:1,127.0.0.1:2/x", "database_url"),
        ("PULSE_REDIS_URL", "redis+sentinel://127.0.0.1:26379/main", "redis_url"),
    ],
)
def test_chaos_external_refuses_urls_it_cannot_proxy(
    settings: ClusterSettings, variable: str, url: str, field: str
) -> None:
    result = invoke(settings, "chaos", "--external", "--faults", "sigkill", **{variable: url})
    assert result.exit_code == 2, result.output
    assert result.stderr.splitlines() == [
        f"pulse: invalid {field}: --external needs one "
        + (
            "Postgres host, not a host list"
            if field == "database_url"
            else "Redis server, not a Sentinel URL"
        )
    ]
