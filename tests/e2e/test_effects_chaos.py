"""Exactly-once effects under chaos: handlers (async and sync) insert one row per run into a
user table through ``ctx.transaction()`` while nodes are SIGKILLed, and SIGSTOPped past
their lease and session timeout. Execution is at least once (frozen nodes wake with runs in
flight), yet afterwards every slot that completed has exactly one row, written by the run
whose completion applied (its fencing token), and no slot that did not complete has any.
"""

from __future__ import annotations

import secrets
import signal
from collections import Counter

import psycopg
import pytest

from cluster.jobs.spec import JobSpec
from cluster.settings import ClusterSettings
from tests.helpers.fleet import Fleet
from tests.helpers.nodes import init_cluster
from tests.helpers.waiting import until

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(180)]
HANDLERS = "tests.e2e.steer_handlers"
TIMING = ("--lease", "3s", "--renew-interval", "1s", "--session-timeout", "4s")
NODES = (("n1", "a"), ("n2", "b"), ("n3", "c"))


def test_each_completed_slot_has_exactly_one_effect_through_kills_and_freezes(
    settings: ClusterSettings, fleet: Fleet
) -> None:
    table = f"effects_{secrets.token_hex(4)}"
    with psycopg.connect(settings.database_url, autocommit=True) as conn:
        columns = "job text, slot timestamptz, token bigint, node text"
        conn.execute(f"CREATE TABLE public.{table} ({columns})")
    payload = {"table": table, "hold_s": 0.8}  # most runs are in flight at any moment
    specs = [
        JobSpec.build(
            f"{kind}-{i}", "@every 1s", f"{HANDLERS}:effects_{kind}", payload=payload,
            retries=3, catch_up="backfill",
        )
        for kind in ("async", "sync")
        for i in range(8)
    ]  # fmt: skip
    init_cluster(settings, *specs)
    for node_id, zone in NODES:
        fleet.start(node_id, zone, *TIMING)

    def effects() -> int:
        return int(fleet.sql(f"SELECT count(*) AS n FROM public.{table}")[0]["n"])

    until(lambda: effects() >= 50, "the jobs to write effects", 60)
    fleet.node("n1").signal(signal.SIGKILL)
    fleet.node("n1").wait(10)
    frozen = fleet.node("n2")

    # Running under n2 and not locked by a transaction of n2's: a run frozen between its
    # fenced completion and the commit holds its row until n2 wakes (and then commits,
    # rightly: nobody could take it), so only these can be taken over while it is frozen.
    takeable = (
        "SELECT 1 FROM jobs WHERE status = 'running' AND locked_by = 'n2' FOR UPDATE SKIP LOCKED"
    )
    # A handler between its insert and its completion: its transaction has written (an
    # xid) and has not touched the jobs table. A takeable row alone is not a run in flight:
    # a claim that committed while n2 froze before reading its answer leaves rows n2 never
    # ran, and then nothing of n2's is refused when it wakes.
    handler_open = (
        "SELECT 1 FROM pg_stat_activity a"
        " WHERE a.application_name = 'n2/effects' AND a.backend_xid IS NOT NULL"
        " AND a.datname = current_database() AND NOT EXISTS ("
        "  SELECT 1 FROM pg_locks l WHERE l.pid = a.pid AND l.relation = 'jobs'::regclass)"
    )

    def frozen_in_flight() -> bool:
        """Freeze n2; keep it frozen only if a handler of its is in flight on a run others
        can take over (else try again shortly)."""
        frozen.signal(signal.SIGSTOP)
        held = bool(fleet.sql(handler_open)) and bool(fleet.sql(takeable))
        if not held:
            frozen.signal(signal.SIGCONT)
        return held

    until(frozen_in_flight, "n2 to be frozen with a run in flight", 30, interval_s=0.05)
    # Frozen past its lease and session timeout: the others take its slots over.
    before = effects()
    until(lambda: effects() >= before + 50, "the survivor to carry on", 60)
    until(
        lambda: (
            not fleet.sql(
                "SELECT 1 FROM pg_stat_activity"
                " WHERE application_name = 'n2' AND datname = current_database()"
            )
        ),
        "the frozen node's lock session to end",
        30,
    )
    # Its session gone is not enough: until a survivor has recovered its runs, nobody else
    # ran them, and a completion written on waking rightly applies. Wake it once they are
    # taken, so that what it writes then must be refused.
    until(lambda: not fleet.sql(takeable), "the frozen node's runs to be recovered", 30)
    frozen.signal(signal.SIGCONT)
    fleet.start("n1", "a", *TIMING)
    after = effects()
    until(lambda: effects() >= after + 50, "the cluster to carry on after the faults", 60)
    fleet.stop_all()
    # The frozen node woke with runs in flight: they were stopped (lease lost), their
    # completions were fenced, or their transactions, closed by the server meanwhile, did
    # not commit. Each way, their effects were refused.
    log = (fleet.workdir / "n2.log").read_text()
    refused = (
        "write rejected: the lease",
        "lease lost; run cancelled",
        "the run's transaction did not commit",
    )
    assert any(line in log for line in refused), log[-4000:]

    rows = fleet.sql(f"SELECT job, slot, token, node FROM public.{table}")
    per_slot = Counter((r["job"], r["slot"]) for r in rows)
    assert [k for k, n in per_slot.items() if n > 1] == [], "a slot's effects committed twice"
    runs = fleet.sql(
        "SELECT job_name AS job, scheduled_for AS slot, status, lease_token AS token FROM runs"
    )
    succeeded = {(r["job"], r["slot"]): r["token"] for r in runs if r["status"] == "succeeded"}
    written = {(r["job"], r["slot"]): r["token"] for r in rows}
    assert written == succeeded, "effects and successful completions differ"
    assert len(written) >= 150
