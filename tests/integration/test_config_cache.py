"""A node's cached view of the ``config`` table (cluster/store/config.py ``ConfigCache``): read
on first use, kept for its time to live, read again after it, and kept as last read while
Postgres cannot be reached (empty before any read: every policy's strictest default)."""

from __future__ import annotations

import dataclasses

import pytest

from cluster.settings import ClusterSettings
from cluster.store.config import ConfigCache
from cluster.store.jobstore.store import JobStore
from cluster.store.side import SideConnection

pytestmark = pytest.mark.timeout(60)


def side(settings: ClusterSettings, name: str) -> SideConnection:
    return SideConnection(settings, name, statement_timeout_s=5.0)


async def test_values_are_cached_for_their_time_to_live(
    store: JobStore, settings: ClusterSettings
) -> None:
    await store.set_config("egress.allow", "10.0.0.0/8")
    cache = ConfigCache(side(settings, "n1/config"), ttl_s=3600)
    fresh = ConfigCache(side(settings, "n2/config"), ttl_s=0)
    try:
        assert (await cache.values())["egress.allow"] == "10.0.0.0/8"
        await store.set_config("egress.allow", "10.1.0.0/16")
        assert (await cache.values())["egress.allow"] == "10.0.0.0/8"  # within its TTL
        assert (await fresh.values())["egress.allow"] == "10.1.0.0/16"
    finally:
        await cache.close()
        await fresh.close()


async def test_postgres_out_of_reach_keeps_the_last_values(
    store: JobStore, settings: ClusterSettings
) -> None:
    away = dataclasses.replace(settings, database_url="postgresql://postgres@127.0.0.1:1/none")
    never = ConfigCache(side(away, "n1/config"), ttl_s=0)
    try:
        assert await never.values() == {}
    finally:
        await never.close()
    await store.set_config("egress.allow", "10.0.0.0/8")
    cache = ConfigCache(side(settings, "n1/config"), ttl_s=0)
    try:
        assert (await cache.values())["egress.allow"] == "10.0.0.0/8"
        cache._side.settings = away  # the next connection fails
        await cache._side.close()
        assert (await cache.values())["egress.allow"] == "10.0.0.0/8"
    finally:
        await cache.close()
