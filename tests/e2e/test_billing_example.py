"""The billing example (``examples/billing_rollup.py``) through a real node: its usage
rollup, every second instead of hourly, writes exactly one usage row per slot through
``ctx.transaction()``, carrying the fencing token of the run that completed the slot, and
rolls up exactly the requests of its period."""

from __future__ import annotations

import dataclasses
import math
import time
from collections import Counter
from datetime import UTC, datetime, timedelta

import psycopg
import pytest

from cluster.settings import ClusterSettings
from examples.billing_rollup import SCHEMA, jobs
from tests.helpers.fleet import Fleet
from tests.helpers.nodes import init_cluster
from tests.helpers.waiting import until

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(90)]
PER_SECOND = 4
SECONDS = 40


def test_the_usage_rollup_writes_one_row_per_slot_with_its_runs_token(
    settings: ClusterSettings, fleet: Fleet
) -> None:
    (spec,) = jobs.specs()
    assert (spec.name, spec.schedule, spec.handler) == (
        "usage-rollup", "@hourly", "examples.billing_rollup:usage_rollup"
    )  # fmt: skip
    payload = {"period_s": 1, "price_per_1k": 50.0}
    fast = dataclasses.replace(spec, schedule="@every 1s", payload=payload)
    init_cluster(settings, fast)
    # The tables in the cluster's schema (first on the handler's search path), so parallel
    # tests keep apart; a deployment keeps them in public.
    base = datetime.fromtimestamp(math.floor(time.time()) - 2, UTC)
    requests = [
        ("acme", base + timedelta(seconds=i / PER_SECOND), "/v1/items")
        for i in range(SECONDS * PER_SECOND)
    ]
    options = f"-c search_path={settings.schema}"
    with psycopg.connect(settings.database_url, autocommit=True, options=options) as conn:
        conn.execute(SCHEMA)
        with conn.cursor() as cur:
            cur.executemany("INSERT INTO api_requests VALUES (%s, %s, %s)", requests)

    def succeeded() -> int:
        rows = fleet.sql("SELECT count(*) AS n FROM runs WHERE status = 'succeeded'")
        return int(rows[0]["n"])

    fleet.start("n1", "a")
    until(lambda: succeeded() >= 6, "six slots of the rollup to succeed", 40)
    fleet.stop_all()

    rows = fleet.sql(
        "SELECT tenant, period_start, period_end, requests, amount_usd, fencing_token, "
        "written_by FROM usage_rows"
    )
    runs = fleet.sql(
        "SELECT scheduled_for, lease_token, status, output FROM runs "
        "WHERE job_name = 'usage-rollup' AND tenant_id = 'acme'"
    )
    per_slot = Counter(r["period_end"] for r in rows)
    assert [slot for slot, n in per_slot.items() if n != 1] == []
    done = {r["scheduled_for"]: r["lease_token"] for r in runs if r["status"] == "succeeded"}
    assert {r["period_end"]: r["fencing_token"] for r in rows} == done
    assert len(done) >= 6
    for row in rows:
        assert row["period_end"] - row["period_start"] == timedelta(seconds=1)
        assert row["written_by"] == "n1"
        if base < row["period_start"] and row["period_end"] <= base + timedelta(seconds=SECONDS):
            assert row["requests"] == PER_SECOND, row
            assert float(row["amount_usd"]) == pytest.approx(PER_SECOND / 1000 * 50.0)
    # What each run reported (pulse runs show) is what its committed row holds.
    reported = {
        r["scheduled_for"]: r["output"]["result"]["requests"]
        for r in runs
        if r["status"] == "succeeded"
    }
    assert reported == {r["period_end"]: r["requests"] for r in rows}
