"""``pulse jobs apply --plan`` against a real Postgres: per job the fields that change, the
next slots before and after (DST included), the catch-up a change sets off, nothing
written; and an apply refusing a plan that went stale (``--plan-file``,
``--expect-revision``) with one line, exit 2 and nothing written."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg
import pytest

from cluster.errors import Conflict
from cluster.jobs.spec import JobSpec
from cluster.settings import ClusterSettings
from cluster.store.jobstore.store import JobStore
from cluster.store.lock.session import LockSession
from node.membership.eachzone import ZoneChildren
from node.state import NodeState
from tests.helpers.cli import Invoke, add_args, assert_bad_input, jobs_rows

MINUTE = timedelta(minutes=1)

TICK = {"name": "tick", "schedule": "*/5 * * * *", "handler": "app.jobs:tick"}
PLAN_KEYS = {"at", "digest", "jobs"}
JOB_PLAN_KEYS = {
    "tenant", "name", "action", "revision", "changes", "next_before", "next_after",
    "catch_up", "dropped", "notes", "edges", "waits_for",
}  # fmt: skip


def write_jobs(path: Path, *entries: dict[str, Any]) -> str:
    path.write_text(json.dumps(list(entries)), "utf-8")
    return str(path)


def written(settings: ClusterSettings) -> tuple[Any, ...]:
    with psycopg.connect(settings.database_url, autocommit=True) as conn:
        revisions = conn.execute(
            f"SELECT * FROM {settings.schema}.job_revisions ORDER BY 1, 2, 3"
        ).fetchall()
    return jobs_rows(settings), revisions


def test_plan_prints_the_changes_and_writes_nothing(
    initialised: Invoke, settings: ClusterSettings, tmp_path: Path
) -> None:
    assert initialised(*add_args("tick")).exit_code == 0
    new = {"name": "fresh", "schedule": "@daily", "handler": "app.jobs:fresh"}
    path = write_jobs(tmp_path / "jobs.json", {**TICK, "schedule": "*/10 * * * *"}, new)
    before = written(settings)
    result = initialised("jobs", "apply", path, "--plan")
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert lines[0] == "update tick (revision 1)"
    assert '  schedule: "*/5 * * * *" -> "*/10 * * * *"' in lines
    assert "  next before:" in lines and "  next after:" in lines
    assert "create fresh (revision 0)" in lines
    assert lines[-1].endswith("2 to change, nothing written")
    assert written(settings) == before

    data = json.loads(initialised("jobs", "apply", path, "--plan", "--json").stdout)
    assert set(data) == PLAN_KEYS
    assert all(set(j) == JOB_PLAN_KEYS for j in data["jobs"])
    tick = data["jobs"][0]
    assert (tick["action"], tick["revision"]) == ("update", 1)
    assert tick["changes"] == {"schedule": ["*/5 * * * *", "*/10 * * * *"]}
    after = [datetime.fromisoformat(s["slot"]) for s in tick["next_after"]]
    assert len(after) == 5 and all(s.minute % 10 == 0 for s in after)
    assert written(settings) == before


def test_a_create_plan_shows_what_the_file_sets_under_the_files_names(
    initialised: Invoke, tmp_path: Path
) -> None:
    """Issue 50: a create printed some 40 `null -> default` lines with internal names."""
    entry = {**TICK, "timeout": "2m", "retries": 2, "labels": {"team": "ops"}, "grace": "60s"}
    path = write_jobs(tmp_path / "jobs.json", entry)
    result = initialised("jobs", "apply", path, "--plan")
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert lines[: lines.index("  next before: none")] == [
        "create tick (revision 0)",
        '  schedule: "*/5 * * * *"',
        '  handler: "app.jobs:tick"',
        '  timeout: "2m"',
        "  retries: 2",
        '  labels: {"team": "ops"}',
    ]  # grace 60s is its default: nothing to show
    data = json.loads(initialised("jobs", "apply", path, "--plan", "--json").stdout)
    assert data["jobs"][0]["changes"] == {
        "schedule": [None, "*/5 * * * *"],
        "handler": [None, "app.jobs:tick"],
        "timeout_s": [None, 120.0],
        "retries": [None, 2],
        "labels": [None, {"team": "ops"}],
    }
    # An update says what changed, under the file's names too.
    assert initialised("jobs", "apply", path).exit_code == 0
    path = write_jobs(tmp_path / "jobs.json", {**entry, "timeout": "5m"})
    assert '  timeout: "2m" -> "5m"' in initialised("jobs", "apply", path, "--plan").stdout


def test_an_apply_refuses_a_plan_that_went_stale(
    initialised: Invoke, settings: ClusterSettings, tmp_path: Path
) -> None:
    assert initialised(*add_args("tick")).exit_code == 0
    path = write_jobs(tmp_path / "jobs.json", {**TICK, "timeout": "2m"})
    plan = tmp_path / "plan.json"
    plan.write_text(initialised("jobs", "apply", path, "--plan", "--json").stdout, "utf-8")

    # Someone pauses the job after the plan was reviewed: the plan is stale.
    assert initialised("jobs", "pause", "tick").exit_code == 0
    before = written(settings)
    stale = initialised("jobs", "apply", path, "--plan-file", str(plan))
    assert_bad_input(stale, "plan")
    assert stale.stderr.strip() == (
        "pulse: invalid plan: stale: job tick is at revision 2, the plan saw 1; plan again"
    )
    by_hand = initialised("jobs", "apply", path, "--expect-revision", "tick=1")
    assert_bad_input(by_hand, "plan")
    assert written(settings) == before

    # The file changed since the plan: refused too.
    plan.write_text(initialised("jobs", "apply", path, "--plan", "--json").stdout, "utf-8")
    edited = write_jobs(tmp_path / "jobs.json", {**TICK, "timeout": "3m"})
    changed = initialised("jobs", "apply", edited, "--plan-file", str(plan))
    assert_bad_input(changed, "plan")
    assert "the definitions changed since the plan was made" in changed.stderr
    assert written(settings) == before

    # A fresh plan applies, and so does the right revision by hand.
    plan.write_text(initialised("jobs", "apply", edited, "--plan", "--json").stdout, "utf-8")
    done = initialised("jobs", "apply", edited, "--plan-file", str(plan))
    assert done.exit_code == 0, done.output
    assert "updated tick" in done.stdout
    final = {**TICK, "timeout": "4m"}
    ok = initialised(
        "jobs", "apply", write_jobs(tmp_path / "j.json", final), "--expect-revision", "tick=3"
    )
    assert ok.exit_code == 0, ok.output
    fresh = {"name": "new", "schedule": "@daily", "handler": "app.jobs:x"}
    absent = initialised(
        "jobs", "apply", write_jobs(tmp_path / "n.json", fresh), "--expect-revision", "new=0"
    )
    assert absent.exit_code == 0, absent.output


def test_bad_plan_options_are_refused(
    initialised: Invoke, settings: ClusterSettings, tmp_path: Path
) -> None:
    path = write_jobs(tmp_path / "jobs.json", TICK)
    assert_bad_input(
        initialised("jobs", "apply", path, "--expect-revision", "tick"), "expect-revision"
    )
    junk = tmp_path / "plan.json"
    junk.write_text("{}", "utf-8")
    assert_bad_input(initialised("jobs", "apply", path, "--plan-file", str(junk)), "plan-file")
    assert jobs_rows(settings) == []


async def test_a_plan_shows_the_dst_rule_of_the_next_slots(store: JobStore) -> None:
    # Europe/Berlin skips 02:00-03:00 on 2026-03-29.
    now = datetime(2026, 3, 27, 12, 0, tzinfo=UTC)
    old = JobSpec.build("nightly", "0 4 * * *", "app.jobs:n", tz="Europe/Berlin")
    await store.definitions.apply([old], now=now)
    new = JobSpec.build("nightly", "30 2 * * *", "app.jobs:n", tz="Europe/Berlin")
    plan = await store.plans.plan([new], now=now)
    (job,) = plan.jobs
    assert job.changes == {"schedule": ["0 4 * * *", "30 2 * * *"]}
    assert [s.slot for s in job.next_before[:2]] == [
        datetime(2026, 3, 28, 3, 0, tzinfo=UTC),  # 04:00 CET
        datetime(2026, 3, 29, 2, 0, tzinfo=UTC),  # 04:00 CEST
    ]
    gap = job.next_after[1]
    assert gap.slot == datetime(2026, 3, 29, 1, 0, tzinfo=UTC)  # 03:00 CEST, after the gap
    assert "the first instant after the DST gap (dst_skipped=shift)" in " ".join(gap.notes)
    assert (await store.get("nightly")).schedule == "0 4 * * *"


async def test_a_plan_shows_the_catch_up_a_change_sets_off(store: JobStore) -> None:
    t0 = datetime(2026, 5, 4, 10, 0, 30, tzinfo=UTC)
    await store.definitions.apply([JobSpec.build("hourly", "0 * * * *", "app.jobs:h")], now=t0)
    # The cluster was down: five slots are overdue by now. Backfill would run them all.
    now = t0 + timedelta(hours=5)
    backfill = JobSpec.build("hourly", "0 * * * *", "app.jobs:h", catch_up="backfill")
    (job,) = (await store.plans.plan([backfill], now=now)).jobs
    assert job.changes == {"catch_up": ["once", "backfill"]}
    assert [s.action for s in job.catch_up] == ["backfill"] * 5
    # Under `once`, one catch-up run and four missed.
    (same,) = (
        await store.plans.plan([JobSpec.build("hourly", "0 * * * *", "app.jobs:h")], now=now)
    ).jobs
    assert same.action == "unchanged"
    assert [s.action for s in same.catch_up] == ["missed"] * 4 + ["catch-up"]
    # A new timing moves the job past its overdue slots: they never run.
    moved = JobSpec.build("hourly", "30 * * * *", "app.jobs:h")
    (job,) = (await store.plans.plan([moved], now=now)).jobs
    assert job.dropped == 5 and job.catch_up == []
    assert any("5 overdue slot(s) of the old timing" in n for n in job.notes)
    assert (await store.get("hourly")).revision == 1


def test_a_module_plan_lists_its_jobs_and_writes_nothing(
    initialised: Invoke, settings: ClusterSettings
) -> None:
    result = initialised("jobs", "apply", "--module", "tests.registries.billing", "--plan")
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert "create acme/billing_rollup (revision 0)" in lines
    assert "create beat (revision 0)" in lines
    assert '  payload: {"plan": "pro"}' in lines
    assert jobs_rows(settings) == []


async def test_a_pruning_plan_lists_the_jobs_it_would_remove(store: JobStore) -> None:
    kept = JobSpec.build("kept", "@hourly", "app.jobs:k")
    await store.definitions.apply([kept, JobSpec.build("dropped", "@daily", "app.jobs:d")])
    plan = await store.plans.plan([kept], prune=True)
    assert [(j.name, j.action, j.revision) for j in plan.jobs] == [
        ("kept", "unchanged", 1),
        ("dropped", "remove", 1),
    ]
    assert plan.jobs[1].changes["schedule"] == ["@daily", None]
    assert [j.name for j in await store.jobs()] == ["dropped", "kept"]
    # The plan's revisions refuse an apply once the job to remove has changed.
    await store.pause("dropped")
    with pytest.raises(Conflict, match="stale: job dropped is at revision 2"):
        await store.definitions.apply([kept], prune=True, expect=plan.expected())
    assert [j.name for j in await store.jobs()] == ["dropped", "kept"]


async def test_a_plan_counts_an_each_zone_jobs_dropped_slots_in_its_children(
    store: JobStore, settings: ClusterSettings
) -> None:
    """The plan of a new timing of an each-zone job counted the overdue slots of the parent,
    which never runs (its slot stays where it was made), instead of its children's; and
    making a job an each-zone one counted none of the slots it owes."""
    t0 = datetime(2026, 5, 4, 10, 0, 30, tzinfo=UTC)
    ping = JobSpec.build("ping", "@every 1m", "app.jobs:h", each_zone=True)
    await store.definitions.apply([ping, JobSpec.build("plain", "@every 1m", "app.jobs:h")], now=t0)
    session = LockSession(settings, "node-a", "a", session_timeout_s=10, statement_timeout_s=5)
    await session.open()
    try:  # zone a's first node comes up ten minutes on: ping@a from 10:11
        await ZoneChildren(NodeState("node-a", "a", 16), session).run_once(t0 + 10 * MINUTE)
    finally:
        await session.close()
    now = t0 + 13 * MINUTE  # ping@a's slots of 10:11 to 10:13 not run; ping's own: 10:01
    every_2m = JobSpec.build("ping", "@every 2m", "app.jobs:h", each_zone=True)
    (job,) = (await store.plans.plan([every_2m], now=now)).jobs
    assert job.dropped == 3, job.notes
    assert any("in its zones' children" in n for n in job.notes), job.notes
    made = JobSpec.build("plain", "@every 1m", "app.jobs:h", each_zone=True)
    (job,) = (await store.plans.plan([made], now=now)).jobs
    assert job.dropped == 13 and any("an each-zone job" in n for n in job.notes), job.notes
