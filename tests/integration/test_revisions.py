"""Job revisions against a real Postgres: every change from the CLI, a job file and a
module writes one revision in its transaction (who, how, the diff), nothing else does;
runs record the revision their slot was claimed under; history and rollback; retention.
The API and ``--sync-jobs`` paths: tests/e2e/test_revisions_remote.py."""

from __future__ import annotations

import getpass
import json
from datetime import timedelta
from pathlib import Path
from typing import Any

import psycopg
import pytest

from cluster.config.retention import DEFAULT_KEEP_FAILED_FOR_S
from cluster.jobs.spec import JobSpec
from cluster.settings import ClusterSettings
from cluster.store.connect import connect
from cluster.store.jobstore.store import JobStore
from tests.helpers.cli import Invoke, add_args, assert_bad_input, jobs_rows
from tests.helpers.history import add, every_10s, finish, rows, run_rows
from tests.helpers.sessions import ALL, T0, Opener, at

BILLING = "tests.registries.billing"


def history(pulse: Invoke, name: str, *extra: str) -> list[dict[str, Any]]:
    result = pulse("jobs", "history", name, "--json", *extra)
    assert result.exit_code == 0, result.output
    revisions: list[dict[str, Any]] = json.loads(result.stdout)["revisions"]
    return revisions


def revision_rows(settings: ClusterSettings) -> list[tuple[Any, ...]]:
    with psycopg.connect(settings.database_url, autocommit=True) as conn:
        return conn.execute(
            f"SELECT tenant_id, job_name, revision, change, who, how, diff::text"
            f" FROM {settings.schema}.job_revisions ORDER BY 1, 2, 3"
        ).fetchall()


def write_jobs(path: Path, *entries: dict[str, Any]) -> str:
    path.write_text(json.dumps(list(entries)), "utf-8")
    return str(path)


def test_each_cli_change_writes_one_revision_naming_the_os_user(
    initialised: Invoke, settings: ClusterSettings, tmp_path: Path
) -> None:
    pulse = initialised
    user = getpass.getuser()
    assert pulse(*add_args("tick")).exit_code == 0
    assert pulse("jobs", "pause", "tick", "--note", "maintenance").exit_code == 0
    assert pulse("jobs", "resume", "tick").exit_code == 0
    # Neither a trigger nor a skip changes the definition: no revision.
    assert pulse("jobs", "trigger", "tick").exit_code == 0
    entry = {"name": "tick", "schedule": "*/10 * * * *", "handler": "app.jobs:tick"}
    path = write_jobs(tmp_path / "jobs.json", entry)
    assert pulse("jobs", "apply", path).exit_code == 0
    assert pulse("jobs", "apply", path).exit_code == 0  # unchanged: no revision
    assert pulse("jobs", "remove", "tick").exit_code == 0

    found = history(pulse, "tick")
    assert [(r["revision"], r["change"], r["how"], r["who"]) for r in found] == [
        (5, "removed", "cli", user),
        (4, "updated", "file", user),
        (3, "updated", "cli", user),
        (2, "updated", "cli", user),
        (1, "created", "cli", user),
    ]
    assert found[1]["diff"] == {"schedule": ["*/5 * * * *", "*/10 * * * *"]}
    assert found[2]["diff"] == {"paused": [True, False]}
    assert found[3]["diff"] == {"paused": [False, True]}
    assert found[4]["diff"]["handler"] == [None, "app.jobs:tick"]
    assert found[0]["definition"]["schedule"] == "*/10 * * * *"

    # Created again: the history of the name goes on.
    assert pulse(*add_args("tick")).exit_code == 0
    again = history(pulse, "tick")
    assert (again[0]["revision"], again[0]["change"]) == (6, "created")
    shown = json.loads(pulse("jobs", "show", "tick", "--json").stdout)
    assert shown["revision"] == 6

    text = pulse("jobs", "history", "tick")
    assert text.exit_code == 0
    assert text.stdout.splitlines()[0].split() == ["REV", "AT", "WHO", "HOW", "CHANGES"]
    assert 'schedule: "*/5 * * * *" -> "*/10 * * * *"' in text.stdout


def test_a_module_apply_writes_revisions_how_module(initialised: Invoke) -> None:
    assert initialised("jobs", "apply", "--module", BILLING).exit_code == 0
    (beat,) = history(initialised, "beat")
    (rollup,) = history(initialised, "billing_rollup", "--tenant", "acme")
    assert (beat["how"], rollup["how"], rollup["change"]) == ("module", "module", "created")
    assert rollup["definition"]["payload"] == {"plan": "pro"}
    assert initialised("jobs", "apply", "--module", BILLING).exit_code == 0
    assert len(history(initialised, "beat")) == 1


def test_history_of_an_unknown_job_is_one_line(initialised: Invoke) -> None:
    result = initialised("jobs", "history", "nope")
    assert result.exit_code == 1
    assert result.stderr.strip() == "pulse: no job named 'nope' in tenant 'default' has a history"


def test_secrets_stay_references_and_literal_passwords_are_masked(
    initialised: Invoke, settings: ClusterSettings, tmp_path: Path
) -> None:
    entries = [
        {
            "name": "ref",
            "schedule": "@hourly",
            "handler": {
                "celery": {"task": "app.tasks.a", "broker": "redis://:${env:BROKER_PW}@h:6379/0"}
            },
        },
        {
            "name": "literal",
            "schedule": "@hourly",
            "handler": {"celery": {"task": "app.tasks.b", "broker": "redis://u:hunter2@h:6379/0"}},
        },
    ]
    path = write_jobs(tmp_path / "jobs.json", *entries)
    assert initialised("jobs", "apply", path, BROKER_PW="x").exit_code == 0
    stored = revision_rows(settings)
    assert "hunter2" not in repr(stored)
    (ref,) = history(initialised, "ref")
    (literal,) = history(initialised, "literal")
    assert "${env:BROKER_PW}" in ref["definition"]["handler"]
    assert "redis://u:***@h:6379/0" in literal["definition"]["handler"]


def test_rollback_writes_the_old_definition_as_a_new_revision(
    initialised: Invoke, settings: ClusterSettings, tmp_path: Path
) -> None:
    pulse = initialised
    assert pulse(*add_args("tick", "--payload", '{"v": 1}')).exit_code == 0
    entry = {"name": "tick", "schedule": "@hourly", "handler": "app.jobs:tock", "payload": {"v": 2}}
    assert pulse("jobs", "apply", write_jobs(tmp_path / "j.json", entry)).exit_code == 0
    done = pulse("jobs", "rollback", "tick", "--to", "1")
    assert done.exit_code == 0, done.output
    assert done.stdout.strip() == "rolled back tick (tenant default) to revision 1: now revision 3"
    found = history(pulse, "tick")
    assert (found[0]["revision"], found[0]["how"]) == (3, "cli")
    assert found[0]["definition"] == found[2]["definition"]
    assert found[0]["diff"] == {
        "schedule": ["@hourly", "*/5 * * * *"],
        "handler": ["app.jobs:tock", "app.jobs:tick"],
        "payload": [{"v": 2}, {"v": 1}],
    }
    same = pulse("jobs", "rollback", "tick", "--to", "3")
    assert same.stdout.strip() == "tick (tenant default) already has revision 3's definition"
    assert len(history(pulse, "tick")) == 3

    # A removed job comes back with the definition it had.
    assert pulse("jobs", "remove", "tick").exit_code == 0
    assert pulse("jobs", "rollback", "tick", "--to", "2").exit_code == 0
    shown = json.loads(pulse("jobs", "show", "tick", "--json").stdout)
    assert (shown["handler"], shown["payload"], shown["revision"]) == ("app.jobs:tock", {"v": 2}, 5)


def test_rollback_to_an_unknown_revision_is_refused_with_nothing_written(
    initialised: Invoke, settings: ClusterSettings
) -> None:
    assert initialised(*add_args("tick")).exit_code == 0
    before = (jobs_rows(settings), revision_rows(settings))
    result = initialised("jobs", "rollback", "tick", "--to", "7")
    assert_bad_input(result, "to")
    assert "has no revision 7" in result.stderr
    assert_bad_input(initialised("jobs", "rollback", "ghost", "--to", "1"), "to")
    assert (jobs_rows(settings), revision_rows(settings)) == before


# -- runs carry their revision ------------------------------------------------------------


async def test_a_run_records_the_revision_its_slot_was_claimed_under(
    store: JobStore, settings: ClusterSettings, open_session: Opener
) -> None:
    await add(store, every_10s("a"))
    node = await open_session("node-a", "zone-a")
    (claimed,) = (await node.claim(ALL, 10, 30.0, now=at(10))).jobs
    # Changed while its slot runs: the run keeps the revision it was claimed under.
    await store.definitions.apply([every_10s("a", timeout="2m")], now=at(11))
    assert (await store.get("a")).revision == 2
    assert await node.completions.complete([finish(claimed)], now=at(12)) == {claimed.id}
    (row,) = await run_rows(settings)
    assert (row["scheduled_for"], row["revision"]) == (at(10), 1)
    (again,) = (await node.claim(ALL, 10, 30.0, now=at(20))).jobs
    (listed,) = [r for r in await store.runs(job="a") if r.status == "running"]
    assert listed.revision == 2
    await node.completions.complete([finish(again)], now=at(21))
    assert [r["revision"] for r in await run_rows(settings)] == [1, 2]


async def test_the_claim_and_completion_write_no_revision(
    store: JobStore, settings: ClusterSettings, open_session: Opener
) -> None:
    await add(store, every_10s("a"), every_10s("b", pause_after_failures=1))
    node = await open_session("node-a", "zone-a")
    a, b = sorted((await node.claim(ALL, 10, 30.0, now=at(10))).jobs, key=lambda j: j.name)
    await node.completions.complete([finish(a), finish(b, "failed", error="x")], now=at(11))
    found = await rows(settings, "SELECT job_name, revision, how FROM job_revisions ORDER BY 1, 2")
    # b paused itself after a failed slot: a change of its definition, made by the node.
    assert [(r["job_name"], r["revision"]) for r in found] == [("a", 1), ("b", 1), ("b", 2)]
    assert found[2]["how"] == "sql"


# -- retention ------------------------------------------------------------------------------


async def test_a_removed_jobs_revisions_are_pruned_after_keep_failed_for(
    store: JobStore, settings: ClusterSettings
) -> None:
    await store.definitions.apply([every_10s("kept"), every_10s("gone")], now=T0)
    await store.remove("gone")
    later = await store.db_now()
    assert (await store.prune(now=later, dry_run=True)).revisions == 0
    past = later + timedelta(seconds=DEFAULT_KEEP_FAILED_FOR_S + 60)
    assert (await store.prune(now=past, dry_run=True)).revisions == 2
    assert (await store.prune(now=past)).revisions == 2
    assert await store.revisions.history("gone", "default") == []
    assert len(await store.revisions.history("kept", "default")) == 1


@pytest.mark.parametrize("how", ["cli", "file"])
async def test_act_as_refuses_an_unknown_how(store: JobStore, how: str) -> None:
    await store.revisions.act_as("someone", how)
    with pytest.raises(ValueError, match="how"):
        await store.revisions.act_as("someone", "telepathy")
    await store.definitions.apply([JobSpec.build("x", "@hourly", "app.jobs:x")])
    (revision,) = await store.revisions.history("x", "default")
    assert (revision.who, revision.how) == ("someone", how)


async def test_a_change_of_paused_and_more_at_once_is_one_revision(store: JobStore) -> None:
    await store.definitions.apply([every_10s("both")], now=T0)
    await store.definitions.apply(
        [JobSpec.build("both", "@every 20s", "app.jobs:x", paused=True)], now=T0
    )
    newest, first = await store.revisions.history("both", "default")
    assert (newest.revision, first.revision) == (2, 1)
    assert newest.diff == {
        "schedule": ["@every 10s", "@every 20s"],
        "handler": ["cluster.chaos.witness:record", "app.jobs:x"],
        "paused": [False, True],
    }
    assert (await store.get("both")).revision == 2


async def test_a_node_of_the_previous_release_still_records_its_runs(
    store: JobStore, settings: ClusterSettings, open_session: Opener
) -> None:
    # Its completions call record_run without a revision (migration 011's signature),
    # kept by migration 029 beside the new one: the run row has no revision.
    await add(store, every_10s("old"))
    job = await store.get("old")
    conn = await connect(settings, "old-node")
    try:
        await conn.execute(
            b"SELECT record_run(%s, 'default', 'old', %s, 1, 'old-node', 'z', 'succeeded', 1,"
            b" %s, %s, 0.1, NULL, NULL, NULL)",
            (job.id, at(10), at(10), at(11)),
        )
    finally:
        await conn.close()
    (row,) = await run_rows(settings)
    assert (row["status"], row["revision"]) == ("succeeded", None)


async def test_an_apply_that_moves_a_job_to_its_zones_is_one_revision(store: JobStore) -> None:
    await store.definitions.apply([JobSpec.build("pinned", "@hourly", "app.jobs:x", zones="eu")])
    (created,) = await store.revisions.history("pinned", "default")
    assert (created.revision, created.definition["zones"]) == (1, ["eu"])
    assert created.diff["zones"] == [None, ["eu"]]
    moved = JobSpec.build("pinned", "@daily", "app.jobs:x", zones="us")
    await store.definitions.apply([moved])
    newest, _ = await store.revisions.history("pinned", "default")
    assert newest.revision == 2
    assert newest.diff == {"schedule": ["@hourly", "@daily"], "zones": [["eu"], ["us"]]}
    assert (await store.get("pinned")).revision == 2


def test_the_fields_added_since_revisions_are_recorded_and_rolled_back(
    initialised: Invoke, tmp_path: Path
) -> None:
    """Labels, max_runs, expectations and payload_schema are part of a job's definition:
    changing one writes a revision with its diff, and a rollback restores it."""
    pulse = initialised
    entry = {"name": "rollup", "schedule": "0 * * * *", "handler": "app.jobs:rollup"}
    path = write_jobs(tmp_path / "jobs.json", entry)
    assert pulse("jobs", "apply", path).exit_code == 0
    schema = {"type": "object", "properties": {"days": {"type": "integer"}}}
    changed = {
        **entry,
        "labels": {"team": "billing"},
        "max_runs": 3,
        "expect_max": "10m",
        "assert": "rows > 0",
        "payload_schema": schema,
    }
    path = write_jobs(tmp_path / "jobs.json", changed)
    result = pulse("jobs", "apply", path)
    assert result.exit_code == 0, result.output

    newest = history(pulse, "rollup")[0]
    assert newest["diff"] == {
        "labels": [{}, {"team": "billing"}],
        "max_runs": [None, 3],
        "expect_max_s": [None, 600.0],
        "asserts": [None, "rows > 0"],
        "payload_schema": [None, schema],
    }
    result = pulse("jobs", "rollback", "rollup", "--to", "1")
    assert result.exit_code == 0, result.output
    shown = json.loads(pulse("jobs", "show", "rollup", "--json").stdout)
    assert (shown["labels"], shown["max_runs"], shown["payload_schema"]) == ({}, None, None)
    assert shown["expect_max_s"] is None and shown["asserts"] is None
