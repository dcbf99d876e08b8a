"""The Postgres database and Redis keys the tests use: one throwaway database per test
session, and per test one schema and one Redis key prefix (a fresh ``ClusterSettings``), so
runs, and parallel CI jobs, never collide. The fixtures of ``tests/conftest.py`` call these.
"""

from __future__ import annotations

import contextlib
import os
import secrets
from collections.abc import Iterator

import psycopg
import redis

from cluster.settings import ClusterSettings

ADMIN_URL = os.environ.get("PULSE_TEST_ADMIN_URL", "postgresql://postgres@127.0.0.1:5432/postgres")
REDIS_URL = os.environ.get("PULSE_TEST_REDIS_URL", "redis://127.0.0.1:6379/0")


def _with_database(url: str, name: str) -> str:
    base, _, _ = url.rpartition("/")
    return f"{base}/{name}"


@contextlib.contextmanager
def throwaway_database() -> Iterator[str]:
    """The URL of a new database, dropped (whoever is still connected) at the end."""
    name = f"pulse_test_{os.getpid()}_{secrets.token_hex(3)}"
    with psycopg.connect(ADMIN_URL, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    try:
        yield _with_database(ADMIN_URL, name)
    finally:
        with psycopg.connect(ADMIN_URL, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def fresh_settings(database_url: str) -> ClusterSettings:
    """A cluster of its own in ``database_url``: a new schema and a new Redis key prefix."""
    tag = secrets.token_hex(4)
    return ClusterSettings(
        database_url=database_url, redis_url=REDIS_URL, schema=f"t_{tag}", cluster=f"test-{tag}"
    )


def forget_redis_keys(settings: ClusterSettings) -> None:
    """Delete every Redis key under the cluster's prefix."""
    client = redis.Redis.from_url(REDIS_URL)
    try:
        keys = list(client.scan_iter(match=settings.key_prefix + "*"))
        if keys:
            client.delete(*keys)
    finally:
        client.close()
