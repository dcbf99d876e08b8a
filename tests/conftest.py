"""Shared fixtures: one throwaway database per test session (per xdist worker), one schema
and one Redis key prefix per test (``tests/helpers/databases.py``), so runs, workers and
parallel CI jobs never collide; and the order the tests run in
(``tests/helpers/scheduling.py``)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

import pytest

from cluster.settings import ClusterSettings
from cluster.store.jobstore.store import JobStore
from tests.helpers.databases import (
    INITIALISING,
    SCHEMAS,
    forget_redis_keys,
    fresh_settings,
    throwaway_database,
)
from tests.helpers.roles import Logins, session_logins
from tests.helpers.scheduling import WholeModules, slow_modules_first
from tests.helpers.sessions import LockSessions, Opener


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    slow_modules_first(items)


def pytest_xdist_make_scheduler(config: pytest.Config, log: object) -> WholeModules:
    return WholeModules(config, log)  # type: ignore[arg-type]


@pytest.fixture(scope="session")
def database_url() -> Iterator[str]:
    with throwaway_database() as url:
        yield url


@pytest.fixture(scope="session")
def logins(database_url: str) -> Iterator[Logins]:
    """Database roles named for this session, and a login in each; dropped at the end."""
    with session_logins(database_url) as found:
        yield found


@pytest.fixture
def settings(request: pytest.FixtureRequest, database_url: str) -> Iterator[ClusterSettings]:
    """A cluster of the test's own. A test that starts from an initialised schema (through
    ``store`` or ``initialised``), unless end-to-end or marked ``new_schema``, may get one
    an earlier test used, emptied (``SchemaPool``)."""
    pooled = not INITIALISING.isdisjoint(request.fixturenames) and not any(
        request.node.get_closest_marker(m) for m in ("e2e", "new_schema")
    )
    cluster = fresh_settings(database_url, SCHEMAS.take() if pooled else None)
    yield cluster
    forget_redis_keys(cluster)
    if pooled:
        SCHEMAS.give_back(database_url, cluster.schema)


@pytest.fixture
async def store(settings: ClusterSettings) -> AsyncIterator[JobStore]:
    async with JobStore.open(settings) as job_store:
        await job_store.init(shards=16)
        SCHEMAS.record_clean(settings.database_url, settings.schema)
        yield job_store


@pytest.fixture
async def open_session(settings: ClusterSettings, store: JobStore) -> AsyncIterator[Opener]:
    """Opens lock sessions (node id, zone) on the ``store``'s schema; closes them all at
    teardown."""
    sessions = LockSessions(settings)
    yield sessions
    await sessions.close()
