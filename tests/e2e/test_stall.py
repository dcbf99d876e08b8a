"""A node whose Postgres traffic stalls, with real node processes (docs/design/failover.md).

``n2`` reaches Postgres through the chaos proxy (``pulse chaos``'s ``pg-stall``): it stops
forwarding anything, as a network that drops packets silently, while ``n2``'s Redis stays
up, so its heartbeat stays fresh and nothing about it looks frozen. It reports its lock
session unanswered; a survivor, seeing that session idle as long, ends it and the survivors
take its shards, long before its (here 30 s) session timeout could have ended it, and its
jobs fire again. When the network heals, ``n2`` takes its share again. No attempt of a slot
ran twice, and the jobs' effects ledger holds exactly one row per completed slot, written
under the fencing token of the completion that applied.

Nothing here is timed: the deadlines only say that something happens well before the
session timeout could have done it.
"""

from __future__ import annotations

import asyncio
import secrets
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator

import psycopg
import pytest

from cluster.chaos.fleet import endpoint, via_proxy
from cluster.chaos.servers.proxy import Proxy
from cluster.jobs.spec import JobSpec
from cluster.settings import ClusterSettings
from tests.helpers.fleet import Fleet
from tests.helpers.nodes import init_cluster
from tests.helpers.waiting import until

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(240)]
SHARDS = 16
SESSION_TIMEOUT_S = 30.0
ARGS = ("--session-timeout", f"{SESSION_TIMEOUT_S:g}s")
TICKS = 16


class ProxyThread:
    """The chaos proxy on an event loop of its own, switched from the test's thread."""

    def __init__(self, upstream: tuple[str, int]) -> None:
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._thread.start()
        self.proxy = Proxy("postgres", upstream)
        asyncio.run_coroutine_threadsafe(self.proxy.start(), self._loop).result(10)

    def switch(self, action: Callable[[], None]) -> None:
        self._loop.call_soon_threadsafe(action)

    def close(self) -> None:
        asyncio.run_coroutine_threadsafe(self.proxy.close(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        self._loop.close()


@pytest.fixture
def proxy(settings: ClusterSettings) -> Iterator[ProxyThread]:
    made = ProxyThread(endpoint(settings.database_url, 5432))
    try:
        yield made
    finally:
        made.close()


@pytest.fixture
def ledger(settings: ClusterSettings) -> Iterator[str]:
    table = f"effects_{secrets.token_hex(4)}"
    with psycopg.connect(settings.database_url, autocommit=True) as conn:
        conn.execute(
            f"CREATE TABLE public.{table} (job text, slot timestamptz, token bigint, node text)"
        )
    try:
        yield table
    finally:
        with psycopg.connect(settings.database_url, autocommit=True) as conn:
            conn.execute(f"DROP TABLE public.{table}")


def _taken_from(fleet: Fleet, node_id: str) -> bool:
    holders = fleet.holders()
    return len(holders) == SHARDS and node_id not in holders.values()


def test_a_stalled_node_loses_its_shards_long_before_its_session_timeout(
    settings: ClusterSettings, fleet: Fleet, proxy: ProxyThread, ledger: str
) -> None:
    ticks = [
        JobSpec.build(f"tick-{i}", "@every 1s", "cluster.chaos.witness:record")
        for i in range(TICKS)
    ]
    effects = [
        JobSpec.build(
            f"effect-{i}", "@every 1s", "tests.e2e.steer_handlers:effects_async",
            payload={"table": ledger, "hold_s": 0.3}, retries=3, catch_up="backfill",
        )
        for i in range(8)
    ]  # fmt: skip
    init_cluster(settings, *ticks, *effects, shards=SHARDS)
    stalled_url = via_proxy(settings.database_url, proxy.proxy.port)
    fleet.start("n1", "a", *ARGS)
    fleet.start("n2", "b", *ARGS, global_args=("--database-url", stalled_url))
    fleet.start("n3", "c", *ARGS)
    until(lambda: set(fleet.holders().values()) == {"n1", "n2", "n3"}, "every node to hold shards")
    until(lambda: _effects(fleet, ledger) >= 20, "the jobs to write effects", 60)

    proxy.switch(proxy.proxy.stall)
    stalled_at = time.time()
    # The old path (its session timeout, then the grace of a blip) needs 32 s at least.
    until(lambda: _taken_from(fleet, "n2"), "the survivors to hold every shard", 25)
    taken_at = time.time()
    survivors = "".join((fleet.workdir / f"{n}.log").read_text() for n in ("n1", "n3"))
    assert "ended the lock session of n2: its statements unanswered" in survivors, fleet.logs()

    def fired_again() -> bool:
        last = {e.job: e.at for e in fleet.executions() if e.node != "n2"}
        return all(last.get(spec.name, 0.0) > taken_at for spec in ticks)

    until(fired_again, "every job to fire again on the survivors", 15)
    assert taken_at - stalled_at < SESSION_TIMEOUT_S

    proxy.switch(proxy.proxy.restore)
    until(lambda: "n2" in fleet.holders().values(), "the healed node to take its share again", 60)
    after = _effects(fleet, ledger)
    until(lambda: _effects(fleet, ledger) >= after + 20, "the cluster to carry on", 60)
    fleet.check_alive()
    fleet.stop_all()

    attempts = Counter((e.job, e.slot, e.attempt) for e in fleet.executions())
    assert [k for k, n in attempts.items() if n > 1] == [], "an attempt of a slot ran twice"
    rows = fleet.sql(f"SELECT job, slot, token FROM public.{ledger}")
    per_slot = Counter((r["job"], r["slot"]) for r in rows)
    assert [k for k, n in per_slot.items() if n > 1] == [], "a slot's effects committed twice"
    runs = fleet.sql(
        "SELECT job_name AS job, scheduled_for AS slot, status, lease_token AS token FROM runs"
        " WHERE job_name LIKE 'effect-%%'"
    )
    succeeded = {(r["job"], r["slot"]): r["token"] for r in runs if r["status"] == "succeeded"}
    assert {(r["job"], r["slot"]): r["token"] for r in rows} == succeeded


def _effects(fleet: Fleet, table: str) -> int:
    fleet.check_alive()
    return int(fleet.sql(f"SELECT count(*) AS n FROM public.{table}")[0]["n"])
