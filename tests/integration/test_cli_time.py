"""``pulse`` commands of time you can shape: ``jobs add --jitter``, ``--at`` and
``--remove-when-done``, ``schedule --jitter --job-id`` and ``jobs show`` printing each slot
with its start; bad input is one line and exit 2 with nothing written."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import psycopg
import pytest

from cluster.settings import ClusterSettings
from cluster.timing.jitter import jittered
from tests.helpers.cli import Invoke, assert_bad_input, assert_one_line_error, jobs_rows

H = "shell:true"


def test_jitter_is_shown_with_each_slot_and_its_start(initialised: Invoke) -> None:
    add = initialised("jobs", "add", "r", "--schedule", "@hourly", "--handler", H,
                      "--tenant", "acme", "--jitter", "10m", "--json")  # fmt: skip
    assert add.exit_code == 0, add.stderr
    job = json.loads(add.stdout)
    slot = datetime.fromisoformat(job["slot_at"])
    assert job["jitter_s"] == 600.0
    assert datetime.fromisoformat(job["next_run_at"]) == jittered("acme", "r", slot, 600.0)
    shown = json.loads(initialised("jobs", "show", "r", "--tenant", "acme", "--json").stdout)
    starts = [datetime.fromisoformat(s) for s in shown["next_starts"]]
    slots = [datetime.fromisoformat(s) for s in shown["next_slots"]]
    assert starts == [jittered("acme", "r", s, 600.0) for s in slots] and len(slots) == 5
    text = initialised("jobs", "show", "r", "--tenant", "acme").stdout
    assert f"  {slots[1].isoformat()}  starts {starts[1].isoformat()}" in text
    after = "2026-03-01T00:30:00+00:00"
    out = initialised("schedule", "@hourly", "--jitter", "10m", "--job-id", "r",
                      "--tenant", "acme", "--after", after, "--count", "2", "--json")  # fmt: skip
    first = datetime(2026, 3, 1, 1, tzinfo=UTC)
    assert json.loads(out.stdout)[0] == {
        "slot": first.isoformat(),
        "start": jittered("acme", "r", first, 600.0).isoformat(),
    }


def test_at_adds_a_one_off_job(initialised: Invoke) -> None:
    at = (datetime.now(UTC) + timedelta(days=1)).replace(microsecond=0)
    add = initialised("jobs", "add", "o", "--at", at.isoformat(), "--handler", H,
                      "--remove-when-done", "--json")  # fmt: skip
    assert add.exit_code == 0, add.stderr
    job = json.loads(add.stdout)
    assert job["schedule"] == f"@at {at.isoformat()}" and job["remove_when_done"] is True
    assert datetime.fromisoformat(job["next_run_at"]) == at


@pytest.mark.parametrize(
    ("args", "field"),
    [
        (["--schedule", "@every 1m", "--jitter", "1m"], "jitter"),
        (["--schedule", "@every 1m", "--jitter", "-1s"], "jitter"),
        (["--schedule", "0 9,17 * * *", "--jitter", "9h"], "jitter"),
        (["--at", "2020-01-01T00:00:00+00:00"], "schedule"),
        (["--at", "2099-01-01T00:00:00"], "schedule"),
    ],
)
def test_bad_time_input_is_refused_with_nothing_written(
    initialised: Invoke, settings: ClusterSettings, args: list[str], field: str
) -> None:
    assert_bad_input(initialised("jobs", "add", "bad", "--handler", H, *args), field)
    assert jobs_rows(settings) == []


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        ([], "Missing option '--schedule'"),
        (["--at", "2099-01-01T00:00:00Z", "--schedule", "@hourly"], "not both"),
    ],
)
def test_schedule_or_at_exactly_one(
    initialised: Invoke, settings: ClusterSettings, args: list[str], needle: str
) -> None:
    result = initialised("jobs", "add", "bad", "--handler", H, *args)
    assert result.exit_code == 2 and result.stdout == ""
    assert_one_line_error(result.stderr, needle, "--help")
    assert jobs_rows(settings) == []


def test_schedule_jitter_needs_a_job_and_a_small_enough_jitter(initialised: Invoke) -> None:
    assert_bad_input(initialised("schedule", "@hourly", "--jitter", "1m"), "jitter")
    too_big = initialised("schedule", "@hourly", "--jitter", "1h", "--job-id", "r")
    assert_bad_input(too_big, "jitter")


def test_backfill_commands(initialised: Invoke) -> None:
    add = initialised("jobs", "add", "r", "--schedule", "@hourly", "--handler", H)
    assert add.exit_code == 0, add.stderr
    span = ["--from", "2026-01-01T00:00:00Z", "--to", "2026-01-01T03:00:00Z"]
    dry = initialised("jobs", "backfill", "r", *span, "--dry-run")
    assert dry.stdout.splitlines() == [f"2026-01-01T0{h}:00:00+00:00" for h in range(3)]
    assert json.loads(initialised("backfills", "list", "--json").stdout) == []
    made = initialised("jobs", "backfill", "r", *span, "--max-parallel", "2", "--json")
    assert made.exit_code == 0, made.stderr
    request = json.loads(made.stdout)
    assert (request["slots_total"], request["status"], request["max_parallel"]) == (3, "active", 2)
    assert "0/3" in initialised("backfills", "list").stdout
    cancelled = initialised("backfills", "cancel", str(request["id"]))
    assert cancelled.stdout.strip().endswith(": cancelled"), cancelled.output
    (shown,) = json.loads(initialised("backfills", "list", "--json").stdout)
    assert shown["status"] == "cancelled"
    assert_bad_input(initialised("backfills", "cancel", "12345"), "id")
    reversed_ = ["--from", "2026-01-02T00:00:00Z", "--to", "2026-01-01T00:00:00Z"]
    assert_bad_input(initialised("jobs", "backfill", "r", *reversed_), "to")
    huge = ["--from", "2000-01-01T00:00:00Z", "--to", "2026-01-01T00:00:00Z"]
    assert_bad_input(initialised("jobs", "backfill", "r", *huge), "to")
    assert_bad_input(
        initialised("jobs", "backfill", "r", *span, "--max-parallel", "0"), "max_parallel"
    )
    assert len(json.loads(initialised("backfills", "list", "--json").stdout)) == 1


def tenant_limits(settings: ClusterSettings) -> list[tuple[object, ...]]:
    with psycopg.connect(settings.database_url, autocommit=True) as conn:
        return conn.execute(
            f"SELECT tenant_id, max_concurrent FROM {settings.schema}.tenant_limits"
        ).fetchall()


def test_tenant_limits_are_set_listed_and_lifted(
    initialised: Invoke, settings: ClusterSettings
) -> None:
    add = initialised("jobs", "add", "r", "--schedule", "@hourly", "--handler", H,
                      "--tenant", "acme")  # fmt: skip
    assert add.exit_code == 0, add.stderr
    done = initialised("tenants", "set", "acme", "--max-concurrent", "3")
    assert done.exit_code == 0, done.stderr
    assert done.stdout.strip() == "tenant acme: at most 3 at once (0 running)"
    assert initialised("tenants", "set", "acme", "--max-concurrent", "5").exit_code == 0
    listed = json.loads(initialised("tenants", "list", "--json").stdout)
    assert [(x["tenant"], x["max_concurrent"], x["running"]) for x in listed] == [("acme", 5, 0)]
    text = initialised("tenants", "list").stdout.splitlines()
    assert text[0].split()[:2] == ["TENANT", "MAX"] and text[1].split()[:3] == ["acme", "5", "0"]
    # Its jobs, and those added later, count against it.
    assert [r[0] for r in jobs_limited(settings)] == [True]
    assert initialised("tenants", "clear", "acme").exit_code == 0
    assert tenant_limits(settings) == [] and [r[0] for r in jobs_limited(settings)] == [False]
    assert initialised("tenants", "list").stdout.strip() == "no tenant limits"


def jobs_limited(settings: ClusterSettings) -> list[tuple[object, ...]]:
    with psycopg.connect(settings.database_url, autocommit=True) as conn:
        return conn.execute(f"SELECT limited FROM {settings.schema}.jobs").fetchall()


@pytest.mark.parametrize("value", ["0", "-2", "1000001"])
def test_a_tenant_limit_below_one_or_too_large_is_refused(
    initialised: Invoke, settings: ClusterSettings, value: str
) -> None:
    result = initialised("tenants", "set", "acme", "--max-concurrent", value)
    assert_bad_input(result, "max_concurrent")
    assert tenant_limits(settings) == []


def test_lifting_a_limit_a_tenant_does_not_have_is_refused(initialised: Invoke) -> None:
    assert_bad_input(initialised("tenants", "clear", "nobody"), "tenant")
    result = initialised("tenants", "set", "acme", "--max-concurrent", "many")
    assert result.exit_code == 2
    assert_one_line_error(result.stderr, "--max-concurrent")
