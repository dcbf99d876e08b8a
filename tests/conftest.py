"""Shared fixtures: one throwaway database per test session, one schema and one Redis key
prefix per test, so runs (and parallel CI jobs) never collide."""

from __future__ import annotations

import os
import secrets
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator

import psycopg
import pytest
import redis

from cluster.settings import ClusterSettings
from cluster.store.jobs import JobStore
from cluster.store.session import LockSession

ADMIN_URL = os.environ.get("PULSE_TEST_ADMIN_URL", "postgresql://postgres@127.0.0.1:5432/postgres")
REDIS_URL = os.environ.get("PULSE_TEST_REDIS_URL", "redis://127.0.0.1:6379/0")


def _with_database(url: str, name: str) -> str:
    base, _, _ = url.rpartition("/")
    return f"{base}/{name}"


@pytest.fixture(scope="session")
def database_url() -> Iterator[str]:
    name = f"pulse_test_{os.getpid()}_{secrets.token_hex(3)}"
    with psycopg.connect(ADMIN_URL, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    try:
        yield _with_database(ADMIN_URL, name)
    finally:
        with psycopg.connect(ADMIN_URL, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture
def settings(database_url: str) -> Iterator[ClusterSettings]:
    tag = secrets.token_hex(4)
    cluster = ClusterSettings(
        database_url=database_url, redis_url=REDIS_URL, schema=f"t_{tag}", cluster=f"test-{tag}"
    )
    yield cluster
    client = redis.Redis.from_url(REDIS_URL)
    try:
        keys = list(client.scan_iter(match=cluster.key_prefix + "*"))
        if keys:
            client.delete(*keys)
    finally:
        client.close()


@pytest.fixture
async def store(settings: ClusterSettings) -> AsyncIterator[JobStore]:
    async with JobStore.open(settings) as job_store:
        await job_store.init(shards=16)
        yield job_store


Opener = Callable[..., Awaitable[LockSession]]


@pytest.fixture
async def open_session(store: JobStore, settings: ClusterSettings) -> AsyncIterator[Opener]:
    """Opens lock sessions (node id, zone) on the ``store``'s schema; closes them all at
    teardown. Statements that take their shards as arguments need no shard locks."""
    opened: list[LockSession] = []

    async def opener(node_id: str, zone: str = "z") -> LockSession:
        session = LockSession(settings, node_id, zone, session_timeout_s=10, statement_timeout_s=5)
        await session.open()
        opened.append(session)
        return session

    yield opener
    for session in opened:
        await session.close()
