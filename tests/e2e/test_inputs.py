"""Runs with inputs end to end: real nodes, the real `pulse` command. A past slot asked for
with ``pulse jobs trigger --slot`` runs once more with the payload given, on a node, with
origin ``rerun``; a trigger with a payload runs with it (origin ``trigger``); the job's
schedule goes on unchanged, and bad input is one line, exit 2, nothing written."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import pytest

from cluster.jobs.spec import JobSpec
from cluster.settings import ClusterSettings
from tests.helpers.cli import spawn
from tests.helpers.fleet import Fleet
from tests.helpers.nodes import init_cluster
from tests.helpers.waiting import until

pytestmark = pytest.mark.e2e

WITNESS = "cluster.chaos.witness:record"
PAST = datetime(2026, 1, 1, tzinfo=UTC)  # a slot of "0 0 1 1 *" before the job existed


def ended(fleet: Fleet, origin: str) -> list[dict[str, Any]]:
    return fleet.sql(
        "SELECT scheduled_for, status, origin, node_id, last_error, attempt FROM runs"
        " WHERE job_name = 'yearly' AND origin = %s AND status <> 'running'",
        (origin,),
    )


def test_a_past_slot_reruns_with_its_payload_and_a_trigger_runs_with_one(
    fleet: Fleet, settings: ClusterSettings
) -> None:
    schema = {"type": "object", "properties": {"fail": {"type": "string"}}}
    init_cluster(settings, JobSpec.build("yearly", "0 0 1 1 *", WITNESS, payload_schema=schema))
    for node_id, zone in (("n1", "a"), ("n2", "b")):
        fleet.start(node_id, zone)
    before = fleet.sql("SELECT slot_at, next_run_at FROM jobs WHERE name = 'yearly'")
    asked = spawn(
        settings, "jobs", "trigger", "yearly", "--slot", PAST.isoformat(),
        "--payload", '{"fail": "rerun input"}', "--json",
    ).result()  # fmt: skip
    assert asked.returncode == 0, asked.stderr
    queued = json.loads(asked.stdout)
    assert (queued["origin"], queued["slot"]) == ("rerun", PAST.isoformat())
    (run,) = until(lambda: ended(fleet, "rerun"), "the rerun of the past slot", 60)
    assert (run["scheduled_for"], run["status"], run["attempt"]) == (PAST, "failed", 1)
    assert "rerun input" in run["last_error"] and run["node_id"] in ("n1", "n2")
    assert [e.slot for e in fleet.executions()] == [PAST], "one execution, of that slot"

    now = spawn(settings, "jobs", "trigger", "yearly", "--merge-payload", '{"fail": "now"}')
    assert now.result().returncode == 0
    (run,) = until(lambda: ended(fleet, "trigger"), "the triggered run", 60)
    assert run["status"] == "failed" and "now" in run["last_error"]
    assert fleet.sql("SELECT slot_at, next_run_at FROM jobs WHERE name = 'yearly'") == before
    # The request is done at the backfiller's first pass after its flight ended (every
    # second while it is active), which the triggered run may come before.
    done = [{"origin": "rerun", "status": "done", "slots_total": 1}]
    asked_for = "SELECT origin, status, slots_total FROM backfills"
    until(lambda: fleet.sql(asked_for) == done, "the rerun request done", 30)

    for extra in (["--slot", "2999-01-01T00:00:00+00:00"], ["--payload", '{"fail": 1}']):
        refused = spawn(settings, "jobs", "trigger", "yearly", *extra).result()
        assert refused.returncode == 2 and refused.stdout == "", refused
        assert len(refused.stderr.splitlines()) == 1 and "Traceback" not in refused.stderr
    assert len(fleet.sql("SELECT 1 FROM backfills")) == 1
    assert len(fleet.executions()) == 2
