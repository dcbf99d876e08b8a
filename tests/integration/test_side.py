"""Side connections (``cluster.store.side``): opened on first use under their name, opened
again after an error that broke them, a deadline on each statement and transaction, driver
errors as ``StoreError``."""

from __future__ import annotations

import dataclasses
import time

import pytest

from cluster.errors import InvalidInput, StoreError
from cluster.settings import ClusterSettings
from cluster.store.connect import SchemaMissing, connect
from cluster.store.jobstore.store import JobStore
from cluster.store.side import SideConnection
from tests.helpers.partition import Partition


async def names(settings: ClusterSettings) -> set[str]:
    conn = await connect(settings, "observer")
    try:
        cur = await conn.execute(
            "SELECT application_name FROM pg_stat_activity"
            " WHERE datname = current_database() AND application_name LIKE 'n1/%%'"
        )
        return {row["application_name"] for row in await cur.fetchall()}
    finally:
        await conn.close()


async def test_it_opens_on_first_use_and_again_after_its_connection_broke(
    store: JobStore, settings: ClusterSettings
) -> None:
    side = SideConnection(settings, "n1/side", statement_timeout_s=5)
    async with side.using():
        assert await names(settings) == set()
        assert len(await side.fetch("db_now", {"now": None})) == 1
        assert await names(settings) == {"n1/side"}
        conn = await connect(settings, "observer")
        try:
            await conn.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                " WHERE application_name = 'n1/side' AND datname = current_database()"
            )
        finally:
            await conn.close()
        with pytest.raises(StoreError, match=r"^db_now: "):
            await side.fetch("db_now", {"now": None})
        assert len(await side.fetch("db_now", {"now": None})) == 1  # a new connection
    assert await names(settings) == set()


async def test_a_missing_schema_says_run_init(settings: ClusterSettings) -> None:
    async with SideConnection(settings, "n1/side", statement_timeout_s=5).using() as side:
        with pytest.raises(SchemaMissing, match="pulse init"):
            await side.fetch("config_rows")


async def test_a_transaction_commits_or_rolls_back_as_a_whole(
    store: JobStore, settings: ClusterSettings
) -> None:
    async with SideConnection(settings, "n1/side", statement_timeout_s=5).using() as side:
        with pytest.raises(InvalidInput):
            async with side.transaction("config") as fetch:
                await fetch("set_config", {"key": "keep_runs", "value": "7"})
                raise InvalidInput("keep_runs", "changed my mind")
        assert ("keep_runs", "7") not in await store.config_values()
        async with side.transaction("config") as fetch:
            await fetch("set_config", {"key": "keep_runs", "value": "7"})
        assert (await store.config_values())["keep_runs"] == "7"


async def test_a_statement_that_hears_nothing_fails_at_its_deadline(
    store: JobStore, settings: ClusterSettings
) -> None:
    partition = Partition(settings.database_url)
    async with partition as url:
        relayed = dataclasses.replace(settings, database_url=url)
        async with SideConnection(relayed, "n1/side", statement_timeout_s=1).using() as side:
            await side.fetch("db_now", {"now": None})
            partition.cut = True
            started = time.monotonic()
            with pytest.raises(StoreError, match=r"^db_now: no answer within 1s"):
                await side.fetch("db_now", {"now": None})
            assert time.monotonic() - started < 2.5  # the deadline: 1 s + 1 s
