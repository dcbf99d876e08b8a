"""Fixtures every integration test shares: the root logger given back after each test, and
the `pulse` command against the test's cluster (``tests/helpers/cli.py``)."""

from __future__ import annotations

import functools
import logging
from collections.abc import AsyncIterator, Iterator

import pytest

from cluster.chaos.fleet import endpoint
from cluster.chaos.servers.proxy import Proxy
from cluster.settings import ClusterSettings
from tests.helpers.cli import Invoke, Shared, add_args, env_of, initialised_pulse, invoke, jobs_rows
from tests.helpers.databases import fresh_settings


@pytest.fixture(autouse=True)
def restore_logging() -> Iterator[None]:
    """CLI commands configure the root logger; each test gets it back as it was."""
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    yield
    root.handlers[:] = handlers
    root.setLevel(level)


@pytest.fixture
def env(settings: ClusterSettings) -> dict[str, str | None]:
    """The environment of a `pulse` command against the test's cluster."""
    return env_of(settings)


@pytest.fixture
def pulse(settings: ClusterSettings) -> Invoke:
    """``pulse ARGS`` in-process against the test's cluster, ``PULSE_*`` by keyword."""
    return functools.partial(invoke, settings)


@pytest.fixture
def initialised(settings: ClusterSettings) -> Invoke:
    """``pulse`` once ``pulse init --shards 16`` has made the test's schema."""
    return initialised_pulse(settings)


@pytest.fixture(scope="module")
def shared(database_url: str) -> Shared:
    """One initialised schema for a module's many bad-input cases, which must never write to
    it: jobs ``existing`` and ``other`` (tenant acme, paused)."""
    settings = fresh_settings(database_url)
    pulse = initialised_pulse(settings)
    assert pulse(*add_args("existing")).exit_code == 0
    assert pulse(*add_args("other", "--tenant", "acme", "--paused")).exit_code == 0
    assert len(jobs_rows(settings)) == 2
    return settings, pulse


@pytest.fixture
async def proxy(settings: ClusterSettings) -> AsyncIterator[Proxy]:
    """The chaos proxy in front of the test's Postgres (``pulse chaos``'s pg-stall)."""
    found = Proxy("postgres", endpoint(settings.database_url, 5432))
    await found.start()
    try:
        yield found
    finally:
        await found.close()
