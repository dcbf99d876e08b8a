"""The test clusters' setup (``tests.helpers.nodes.init_cluster``) plans the jobs it is
given as one job file is applied: from one reading of the database clock. A chain of
``@every 1s`` jobs added while the clock turns a second then shares its first slot, as the
end-to-end chain tests assume (tests/e2e/test_gates.py)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from datetime import datetime, timedelta

import pytest

from cluster.jobs.spec import JobSpec
from cluster.settings import ClusterSettings
from cluster.store.jobstore.scoped import ScopedConnection
from tests.helpers.history import rows
from tests.helpers.nodes import init_cluster
from tests.helpers.sessions import T0

WITNESS = "cluster.chaos.witness:record"


def stepping(start: datetime, step: timedelta) -> Iterator[datetime]:
    moment = start
    while True:
        yield moment
        moment += step


def test_a_chain_set_up_across_a_seconds_turn_shares_its_first_slot(
    settings: ClusterSettings, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The database clock, each time a statement reads it, 5 ms on from 10 ms before a second.
    clock = stepping(T0 - timedelta(milliseconds=10), timedelta(milliseconds=5))

    async def db_now(self: ScopedConnection, now: datetime | None = None) -> datetime:
        return now if now is not None else next(clock)

    monkeypatch.setattr(ScopedConnection, "db_now", db_now)
    init_cluster(
        settings,
        JobSpec.build("a", "@every 1s", WITNESS),
        JobSpec.build("b", "@every 1s", WITNESS, after="a"),
        JobSpec.build("c", "@every 1s", WITNESS, after="b"),
    )
    found = asyncio.run(rows(settings, "SELECT name, slot_at FROM jobs ORDER BY name"))
    assert [(r["name"], r["slot_at"]) for r in found] == [
        ("a", T0), ("b", T0), ("c", T0)
    ]  # fmt: skip
