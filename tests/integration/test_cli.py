"""Every `pulse` admin command with good and bad input.

Most cases run in-process through click's CliRunner (fast); a few run the real CLI as a
subprocess (``python -m node`` is the `pulse` entry point) to check what an operator sees:
exit codes, one-line errors, no tracebacks, no passwords.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import click
import psycopg
import pytest

from cluster.settings import ClusterSettings
from cluster.store.schema.migrate import available
from cluster.timing.schedule import parse_schedule
from node.cli import cli
from tests.helpers.cli import (
    HANDLER,
    JOB_KEYS,
    RUN_KEYS,
    SHOW_KEYS,
    Invoke,
    Shared,
    add_args,
    assert_bad_input,
    assert_one_line_error,
    invoke,
    jobs_rows,
    spawn,
)

UNREACHABLE = "postgresql://postgres:s3cret-pw@127.0.0.1:1/nowhere"

APPLY_KEYS = {"created", "updated", "unchanged", "removed"}


# -- helpers -------------------------------------------------------------------------------


def execute(settings: ClusterSettings, statement: str, params: Any = None) -> None:
    with psycopg.connect(settings.database_url, autocommit=True) as conn:
        conn.execute(f"SET search_path TO {settings.schema}")
        conn.execute(statement, params)


def is_aware_iso(text: str) -> datetime:
    moment = datetime.fromisoformat(text)
    assert moment.tzinfo is not None and moment.utcoffset() is not None, text
    return moment


# -- init ----------------------------------------------------------------------------------


def test_init_then_init_again(pulse: Invoke, settings: ClusterSettings) -> None:
    first = pulse("init", "--shards", "16")
    assert first.exit_code == 0
    names = [m.name for m in available()]
    assert first.stdout.strip() == (
        f"schema {settings.schema} at {names[-1]} (applied: {', '.join(names)}); 16 shards"
    )
    again = pulse("init")
    assert again.exit_code == 0
    assert again.stdout.strip().endswith("(applied: none); 16 shards")
    changed = pulse("init", "--shards", "32")
    assert changed.exit_code == 2
    assert_one_line_error(changed.stderr, "invalid shards", "16")


@pytest.mark.parametrize("value", ["0", "-3", "70000"])
def test_init_rejects_bad_shard_counts(
    pulse: Invoke, value: str, settings: ClusterSettings
) -> None:
    assert_bad_input(pulse("init", "--shards", value), "shards")
    with psycopg.connect(settings.database_url) as conn:
        found = conn.execute(
            "SELECT 1 FROM pg_namespace WHERE nspname = %s", (settings.schema,)
        ).fetchall()
    assert found == [], "nothing created"


def test_commands_before_init_say_run_init(pulse: Invoke) -> None:
    for args in (["jobs", "list"], add_args(), ["runs"], ["jobs", "show", "x"]):
        result = pulse(*args)
        assert result.exit_code == 1, args
        assert_one_line_error(result.stderr, "pulse init")


# -- jobs add: good input ------------------------------------------------------------------


def test_add_text_and_json(initialised: Invoke, settings: ClusterSettings) -> None:
    result = initialised(*add_args())
    assert result.exit_code == 0, result.stderr
    assert result.stdout.startswith("created tick (tenant default); next run 20")
    next_run = is_aware_iso(result.stdout.strip().rsplit(" ", 1)[1])
    assert next_run.minute % 5 == 0 and next_run.second == 0

    result = initialised(
        "jobs", "add", "nightly", "--schedule", "30 2 * * *", "--handler", "shell:echo hi",
        "--tz", "Europe/Berlin", "--payload", '{"a": [1, 2], "b": "ü"}', "--tenant", "acme",
        "--catch-up", "backfill", "--grace", "90s", "--max-backfill", "7", "--timeout", "1h",
        "--retries", "2", "--retry-backoff", "500ms", "--paused", "--json",
    )  # fmt: skip
    assert result.exit_code == 0, result.stderr
    data = json.loads(result.stdout)
    assert set(data) == JOB_KEYS
    assert {k: data[k] for k in ("tenant", "name", "schedule", "tz", "handler", "payload")} == {
        "tenant": "acme",
        "name": "nightly",
        "schedule": "30 2 * * *",
        "tz": "Europe/Berlin",
        "handler": "shell:echo hi",
        "payload": {"a": [1, 2], "b": "ü"},
    }
    assert (data["status"], data["paused"], data["catch_up"]) == ("paused", True, "backfill")
    assert (data["grace_s"], data["max_backfill"], data["timeout_s"]) == (90.0, 7, 3600.0)
    assert (data["retries"], data["retry_backoff_s"]) == (2, 0.5)
    assert 0 <= data["shard"] < 16
    assert data["next_run_at"] is None, "a paused job is never due"
    assert len(jobs_rows(settings)) == 2

    resumed = initialised("jobs", "resume", "nightly", "--tenant", "acme")
    assert resumed.exit_code == 0, resumed.stderr
    next_run = is_aware_iso(resumed.stdout.strip().rsplit(" ", 1)[1])
    local = next_run.astimezone(ZoneInfo("Europe/Berlin"))
    assert (local.hour, local.minute) in ((2, 30), (3, 0))  # 03:00 on a spring-forward day


# -- jobs add: bad input -------------------------------------------------------------------

BAD_ADD = [
    (["--schedule", "not a cron"], "schedule"),
    (["--schedule", "0 0 30 2 *"], "schedule"),
    (["--schedule", "61 * * * *"], "schedule"),
    (["--schedule", "* * * *"], "schedule"),
    (["--schedule", "@fortnightly"], "schedule"),
    (["--schedule", "@every 0s"], "schedule"),
    (["--tz", "Mars/Olympus"], "tz"),
    (["--tz", "../../etc/passwd"], "tz"),
    (["--handler", "no_colon"], "handler"),
    (["--handler", "pkg.mod:"], "handler"),
    (["--handler", "pkg mod:fn"], "handler"),
    (["--handler", "shell:"], "handler"),
    (["--payload", "[1, 2]"], "payload"),
    (["--payload", '"a string"'], "payload"),
    (["--payload", "null"], "payload"),
    (["--payload", "{not json"], "payload"),
    (["--payload", '{"a": NaN}'], "payload"),
    (["--payload", '{"nul": "\\u0000"}'], "payload"),
    (["--payload", '{"lone": "\\ud800"}'], "payload"),
    (["--payload", '{"a": ' + "[" * 5000 + "]" * 5000 + "}"], "payload"),
    (["--catch-up", "sometimes"], "catch_up"),
    (["--timeout", "-5s"], "timeout"),
    (["--timeout", "0s"], "timeout"),
    (["--timeout", "5 minutes"], "timeout"),
    (["--grace", "-1s"], "grace"),
    (["--retry-backoff", "-10s"], "retry_backoff"),
    (["--retries", "-1"], "retries"),
    (["--retries", "many"], "retries"),
    (["--retries", "99999999999"], "retries"),
    (["--max-backfill", "0"], "max_backfill"),
    (["--dst-repeated", "thrice"], "dst_repeated"),
    (["--dst-skipped", "never"], "dst_skipped"),
    (["--tenant", ""], "tenant"),
    (["--tenant", "x" * 201], "tenant"),
    (["--keep-for", "0s"], "keep_for"),
    (["--keep-for", "-1d"], "keep_for"),
    (["--keep-runs", "0"], "keep_runs"),
    (["--output-limit", "257KiB"], "output_limit"),
    (["--output-limit", "lots"], "output_limit"),
    (["--late-after", "0s"], "late_after"),
    (["--pause-after-failures", "0"], "pause_after_failures"),
    (["--overlap", "queue"], "overlap"),
    (["--overlap", "allow", "--max-concurrent", "0"], "max_concurrent"),
    (["--max-concurrent", "3"], "max_concurrent"),
    (["--overlap", "replace", "--max-concurrent", "3"], "max_concurrent"),
    (["--cancel-grace", "-1s"], "cancel_grace"),
    (["--priority", "101"], "priority"),
    (["--priority", "-1"], "priority"),
    (["--priority", "high"], "priority"),
]


@pytest.mark.parametrize(("extra", "field"), BAD_ADD, ids=[f"{f}:{e[-1][:20]}" for e, f in BAD_ADD])
def test_add_bad_input_writes_nothing(shared: Shared, extra: list[str], field: str) -> None:
    settings, invoke = shared
    before = jobs_rows(settings)
    assert_bad_input(invoke(*add_args("tick", *extra)), field)
    assert jobs_rows(settings) == before


def test_priority_round_trips(initialised: Invoke) -> None:
    result = initialised(*add_args("urgent", "--priority", "40", "--json"))
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["priority"] == 40
    result = initialised(*add_args("plain", "--json"))
    assert json.loads(result.output)["priority"] == 0


def test_steering_options_round_trip(initialised: Invoke) -> None:
    result = initialised(
        *add_args("steered", "--overlap", "replace", "--cancel-grace", "30s", "--json")
    )
    assert result.exit_code == 0, result.output
    job = json.loads(result.output)
    assert (job["overlap"], job["cancel_grace_s"], job["cancel_by"]) == ("replace", 30.0, None)


def test_runs_cancel_bad_input_writes_nothing(shared: Shared) -> None:
    settings, invoke = shared
    before = jobs_rows(settings)
    both = invoke("runs", "cancel", "existing", "--all", "--slot", "2026-01-01T00:00:00Z")
    assert both.exit_code == 2 and both.output.count("\n") == 1, both.output
    assert_bad_input(invoke("runs", "cancel", "existing", "--slot", "yesterday"), "slot")
    assert jobs_rows(settings) == before


def test_day2_options_round_trip(initialised: Invoke) -> None:
    result = initialised(
        *add_args("kept", "--keep-for", "2d", "--keep-runs", "50", "--output-limit", "64k",
                  "--late-after", "5m", "--pause-after-failures", "3", "--json"),
    )  # fmt: skip
    assert result.exit_code == 0, result.stderr
    data = json.loads(result.stdout)
    assert (data["keep_for_s"], data["keep_runs"]) == (172800.0, 50)
    assert (data["output_limit"], data["late_after_s"]) == (65536, 300.0)
    assert (data["pause_after_failures"], data["failed_slots"], data["pause_note"]) == (3, 0, None)
    defaults = json.loads(initialised(*add_args("plain", "--json")).stdout)
    assert (defaults["keep_for_s"], defaults["keep_runs"]) == (None, None)
    assert (defaults["output_limit"], defaults["late_after_s"]) == (16384, 60.0)


def test_pause_note_is_shown_and_cleared_on_resume(initialised: Invoke) -> None:
    initialised(*add_args("tick"))
    paused = initialised("jobs", "pause", "tick", "--note", "upstream migration until Friday")
    assert paused.exit_code == 0, paused.stderr
    listed = initialised("jobs", "list")
    assert "NOTE" in listed.stdout and "upstream migration until Friday" in listed.stdout
    shown = json.loads(initialised("jobs", "show", "tick", "--json").stdout)
    assert shown["pause_note"] == "upstream migration until Friday"
    status = initialised("status")
    assert "paused jobs (1):" in status.stdout
    assert "default/tick: upstream migration until Friday" in status.stdout
    initialised("jobs", "resume", "tick")
    assert json.loads(initialised("jobs", "show", "tick", "--json").stdout)["pause_note"] is None


@pytest.mark.parametrize("name", ["", "   ", "tab\there", "x" * 201, "bad\udcffbyte"])
def test_add_bad_name(shared: Shared, name: str) -> None:
    settings, invoke = shared
    before = jobs_rows(settings)
    assert_bad_input(invoke(*add_args(name)), "name")
    assert jobs_rows(settings) == before


def test_add_payload_over_one_mib(initialised: Invoke, settings: ClusterSettings) -> None:
    # Too long for one argv entry of a real process (128 KiB), so in-process only.
    payload = json.dumps({"blob": "x" * (1024 * 1024)})
    assert_bad_input(initialised(*add_args("tick", "--payload", payload)), "payload")
    just_fits = json.dumps({"blob": "x" * (1024 * 1024 - 20)})
    assert len(just_fits.encode()) <= 1024 * 1024
    assert initialised(*add_args("fits", "--payload", just_fits)).exit_code == 0
    assert len(jobs_rows(settings)) == 1


def test_add_duplicate_name(initialised: Invoke, settings: ClusterSettings) -> None:
    assert initialised(*add_args()).exit_code == 0
    before = jobs_rows(settings)
    result = initialised(*add_args("tick", "--schedule", "@daily"))
    assert_bad_input(result, "name")
    assert "already exists" in result.stderr
    assert jobs_rows(settings) == before
    assert initialised(*add_args("tick", "--tenant", "other")).exit_code == 0


USAGE_ERRORS = [
    (["jobs", "add", "tick", "--handler", HANDLER], "Missing option '--schedule'"),
    (["jobs", "add", "--schedule", "@daily", "--handler", HANDLER], "Missing argument 'NAME'"),
    ([*add_args("tick"), "--colour", "red"], "No such option '--colour'"),
    (["jobs", "explode"], "No such command 'explode'"),
    (["explode"], "No such command 'explode'"),
    (["init", "--shards", "many"], "'--shards'"),
    (["runs", "--status", "exploded"], "'--status'"),
    (["runs", "--limit", "0"], "'--limit'"),
    (["runs", "--limit", "x"], "'--limit'"),
    (["schedule", "@hourly", "--count", "0"], "'--count'"),
    (["schedule"], "Missing argument 'EXPR'"),
    (["--log-format", "xml", "jobs", "list"], "'--log-format'"),
]


@pytest.mark.parametrize(("args", "needle"), USAGE_ERRORS, ids=[n for _, n in USAGE_ERRORS])
def test_usage_errors_are_one_line_exit_2(shared: Shared, args: list[str], needle: str) -> None:
    settings, invoke = shared
    before = jobs_rows(settings)
    result = invoke(*args)
    assert result.exit_code == 2
    assert result.stdout == ""
    assert_one_line_error(result.stderr, needle, "--help")
    assert jobs_rows(settings) == before


def test_a_bare_group_prints_its_help(pulse: Invoke) -> None:
    result = pulse("jobs")
    assert "Usage: pulse jobs" in result.output
    assert "add" in result.output and "apply" in result.output


# -- awkward text through the CLI ----------------------------------------------------------

NASTY = ["'; DROP TABLE jobs; --", 'it\'s "quoted"', "日本語 🚀", "%s %(name)s {0} \\n"]


def test_awkward_names_and_payloads_round_trip(
    initialised: Invoke, settings: ClusterSettings
) -> None:
    payload = {n: n for n in NASTY}
    for name in NASTY:
        args = add_args(name, "--tenant", name, "--payload", json.dumps(payload), "--json")
        result = initialised(*args)
        assert result.exit_code == 0, result.stderr
        assert (json.loads(result.stdout)["name"], json.loads(result.stdout)["payload"]) == (
            name,
            payload,
        )
        shown = json.loads(initialised("jobs", "show", name, "--tenant", name, "--json").stdout)
        assert (shown["name"], shown["tenant"], shown["payload"]) == (name, name, payload)
        paused = initialised("jobs", "pause", name, "--tenant", name)
        assert paused.exit_code == 0 and name in paused.stdout
    listed = json.loads(initialised("jobs", "list", "--json").stdout)
    assert sorted(j["name"] for j in listed) == sorted(NASTY)
    assert all(j["payload"] == payload for j in listed)
    text = initialised("jobs", "list").stdout
    assert all(name in text for name in NASTY)
    assert len(jobs_rows(settings)) == len(NASTY)


# -- list, show, pause, resume, trigger, remove --------------------------------------------


def test_list_text_json_and_tenant_filter(initialised: Invoke) -> None:
    empty = initialised("jobs", "list")
    assert empty.exit_code == 0 and "no jobs" in empty.stdout
    assert json.loads(initialised("jobs", "list", "--json").stdout) == []
    initialised(*add_args("b"))
    initialised(*add_args("a", "--tenant", "acme"))
    initialised(*add_args("c", "--paused"))
    text = initialised("jobs", "list").stdout.splitlines()
    assert text[0].split() == [
        "TENANT",
        "NAME",
        "SCHEDULE",
        "TZ",
        "STATUS",
        "NEXT",
        "RUN",
        "HANDLER",
    ]
    assert [line.split()[:2] for line in text[1:]] == [
        ["acme", "a"],
        ["default", "b"],
        ["default", "c"],
    ]
    data = json.loads(initialised("jobs", "list", "--json").stdout)
    assert [(j["tenant"], j["name"], j["status"]) for j in data] == [
        ("acme", "a", "idle"),
        ("default", "b", "idle"),
        ("default", "c", "paused"),
    ]
    assert all(set(j) == JOB_KEYS for j in data)
    only = json.loads(initialised("jobs", "list", "--tenant", "acme", "--json").stdout)
    assert [j["name"] for j in only] == ["a"]


def test_show_text_and_json(initialised: Invoke, settings: ClusterSettings) -> None:
    initialised(*add_args())
    data = json.loads(initialised("jobs", "show", "tick", "--json").stdout)
    assert set(data) == SHOW_KEYS
    slots = [is_aware_iso(s) for s in data["next_slots"]]
    assert len(slots) == 5
    assert slots[0] == is_aware_iso(data["next_run_at"])
    assert all(b - a == timedelta(minutes=5) for a, b in itertools.pairwise(slots))
    assert data["recent_runs"] == []

    slot = datetime(2030, 1, 1, 0, 5, tzinfo=UTC)
    execute(
        settings,
        "INSERT INTO runs (job_id, tenant_id, job_name, scheduled_for, status, node_id, zone,"
        " started_at, finished_at, duration_s, last_error)"
        " SELECT id, tenant_id, name, %s, 'failed', 'node-1', 'z1', %s, %s, 1.5, 'boom'"
        " FROM jobs WHERE name = 'tick'",
        (slot, slot, slot),
    )
    data = json.loads(initialised("jobs", "show", "tick", "--json").stdout)
    (run,) = data["recent_runs"]
    assert set(run) == RUN_KEYS
    assert (run["job"], run["status"], run["error"], run["node_id"]) == (
        "tick",
        "failed",
        "boom",
        "node-1",
    )
    assert is_aware_iso(run["scheduled_for"]) == slot

    text = initialised("jobs", "show", "tick")
    assert text.exit_code == 0
    assert "name:" in text.stdout and "next slots:" in text.stdout and "recent runs:" in text.stdout
    assert "node-1" in text.stdout


def test_pause_resume_trigger_remove(initialised: Invoke, settings: ClusterSettings) -> None:
    initialised(*add_args("tick", "--schedule", "@yearly"))
    before = json.loads(initialised("jobs", "show", "tick", "--json").stdout)

    paused = initialised("jobs", "pause", "tick")
    assert paused.exit_code == 0 and paused.stdout.startswith(
        "paused tick (tenant default): paused"
    )
    resumed = initialised("jobs", "resume", "tick")
    assert resumed.exit_code == 0 and resumed.stdout.startswith(
        "resumed tick (tenant default): idle"
    )
    after_resume = json.loads(initialised("jobs", "show", "tick", "--json").stdout)
    assert after_resume["next_run_at"] == before["next_run_at"], "next future yearly slot"

    triggered = initialised("jobs", "trigger", "tick")
    assert triggered.exit_code == 0 and triggered.stdout.startswith("triggered tick")
    now = json.loads(initialised("jobs", "show", "tick", "--json").stdout)
    assert is_aware_iso(now["next_run_at"]) < is_aware_iso(before["next_run_at"])
    assert is_aware_iso(now["next_run_at"]) <= datetime.now(UTC)
    assert now["schedule"] == "@yearly" and now["status"] == "idle"
    assert is_aware_iso(now["next_slots"][1]) == is_aware_iso(before["next_run_at"]), (
        "the regular slot still follows"
    )

    removed = initialised("jobs", "remove", "tick")
    assert removed.exit_code == 0 and removed.stdout.strip() == "removed tick (tenant default)"
    assert jobs_rows(settings) == []


@pytest.mark.parametrize("verb", ["show", "pause", "resume", "trigger", "remove"])
def test_control_of_a_missing_job_exits_1(
    initialised: Invoke, settings: ClusterSettings, verb: str
) -> None:
    initialised(*add_args("tick", "--tenant", "acme"))
    before = jobs_rows(settings)
    result = initialised("jobs", verb, "tick")
    assert result.exit_code == 1
    assert result.stdout == ""
    assert_one_line_error(result.stderr, "no job named 'tick'")
    assert jobs_rows(settings) == before


def test_trigger_of_a_running_job_is_refused(
    initialised: Invoke, settings: ClusterSettings
) -> None:
    initialised(*add_args())
    execute(settings, "UPDATE jobs SET status = 'running', locked_by = 'n1'")
    before = jobs_rows(settings)
    result = initialised("jobs", "trigger", "tick")
    assert_bad_input(result, "name")
    assert "running" in result.stderr
    assert jobs_rows(settings) == before


# -- runs ----------------------------------------------------------------------------------


def test_runs_text_json_and_filters(initialised: Invoke, settings: ClusterSettings) -> None:
    assert "no runs" in initialised("runs").stdout
    assert json.loads(initialised("runs", "--json").stdout) == []
    initialised(*add_args("a"))
    initialised(*add_args("b", "--tenant", "acme"))
    base = datetime(2030, 1, 1, tzinfo=UTC)
    for i, (name, status) in enumerate([("a", "succeeded"), ("a", "failed"), ("b", "skipped")]):
        execute(
            settings,
            "INSERT INTO runs (job_id, tenant_id, job_name, scheduled_for, status, last_error)"
            " SELECT id, tenant_id, name, %s, %s, %s FROM jobs WHERE name = %s",
            (base + timedelta(minutes=i), status, "line one\nline two" if i == 1 else None, name),
        )
    data = json.loads(initialised("runs", "--json").stdout)
    assert [(r["job"], r["status"]) for r in data] == [
        ("b", "skipped"),
        ("a", "failed"),
        ("a", "succeeded"),
    ]
    assert all(set(r) == RUN_KEYS for r in data)
    assert all(is_aware_iso(r["scheduled_for"]) for r in data)
    failed = json.loads(initialised("runs", "--status", "failed", "--json").stdout)
    assert [r["error"] for r in failed] == ["line one\nline two"]
    assert [r["job"] for r in json.loads(initialised("runs", "--job", "a", "--json").stdout)] == [
        "a",
        "a",
    ]
    assert [
        r["tenant"] for r in json.loads(initialised("runs", "--tenant", "acme", "--json").stdout)
    ] == ["acme"]
    assert len(json.loads(initialised("runs", "--limit", "1", "--json").stdout)) == 1
    text = initialised("runs").stdout.splitlines()
    assert text[0].split()[:2] == ["SCHEDULED", "FOR"]
    assert len(text) == 4
    assert "line one" in text[2] and "line two" not in initialised("runs").stdout


# -- jobs apply ----------------------------------------------------------------------------

GOOD_FILE = """
- name: ok1
  schedule: "*/5 * * * *"
  handler: app.jobs:tick
  payload: {quote: "it's \\"q\\"", sql: "'; DROP TABLE jobs; --", u: "日本"}
- name: ok2
  tenant: acme
  schedule: "@hourly"
  handler: "shell:echo hi"
  tz: Europe/Berlin
  catch_up: skip
  grace: 30s
  timeout: 2m
  retries: 1
  retry_backoff: 1s
  max_backfill: 3
  paused: true
"""

BAD_FILE = """
- name: ok1
  schedule: "*/5 * * * *"
  handler: app.jobs:tick
- name: bad2
  schedule: "0 0 30 2 *"
  handler: app.jobs:tick
- name: ok3
  schedule: "@hourly"
  handler: app.jobs:tick
- name: bad4
  schedule: "@hourly"
  handler: app.jobs:tick
  tz: Mars/Olympus
- name: ok5
  schedule: "@daily"
  handler: app.jobs:tick
"""


def test_apply_yaml_is_idempotent(
    initialised: Invoke, settings: ClusterSettings, tmp_path: Path
) -> None:
    path = tmp_path / "jobs.yaml"
    path.write_text(GOOD_FILE, "utf-8")
    first = initialised("jobs", "apply", str(path))
    assert first.exit_code == 0, first.stderr
    assert first.stdout.splitlines() == [
        "created ok1",
        "created acme/ok2",
        "2 created, 0 updated, 0 removed, 0 unchanged",
    ]
    rows = jobs_rows(settings)
    second = initialised("jobs", "apply", str(path))
    assert second.exit_code == 0
    assert second.stdout.strip() == "no changes (2 jobs unchanged)"
    assert jobs_rows(settings) == rows
    as_json = json.loads(initialised("jobs", "apply", str(path), "--json").stdout)
    assert as_json == {
        "created": [],
        "updated": [],
        "unchanged": ["ok1", "acme/ok2"],
        "removed": [],
    }
    shown = json.loads(initialised("jobs", "show", "ok1", "--json").stdout)
    assert shown["payload"] == {"quote": 'it\'s "q"', "sql": "'; DROP TABLE jobs; --", "u": "日本"}
    ok2 = json.loads(initialised("jobs", "show", "ok2", "--tenant", "acme", "--json").stdout)
    assert (ok2["tz"], ok2["catch_up"], ok2["grace_s"], ok2["timeout_s"]) == (
        "Europe/Berlin",
        "skip",
        30.0,
        120.0,
    )
    assert (ok2["retries"], ok2["retry_backoff_s"], ok2["max_backfill"], ok2["status"]) == (
        1,
        1.0,
        3,
        "paused",
    )


def test_apply_json_update_and_prune(
    initialised: Invoke, settings: ClusterSettings, tmp_path: Path
) -> None:
    initialised(*add_args("stray"))
    initialised(*add_args("other", "--tenant", "acme"))
    path = tmp_path / "jobs.json"
    entries = [
        {"name": "stray", "schedule": "@daily", "handler": HANDLER},
        {"name": "new", "schedule": "@hourly", "handler": HANDLER},
    ]
    path.write_text(json.dumps({"jobs": entries}), "utf-8")
    result = json.loads(initialised("jobs", "apply", str(path), "--json").stdout)
    assert set(result) == APPLY_KEYS
    assert (result["created"], result["updated"], result["removed"]) == (["new"], ["stray"], [])
    pruned = initialised("jobs", "apply", str(path), "--prune")
    assert pruned.exit_code == 0
    assert pruned.stdout.splitlines() == [
        "removed acme/other",
        "0 created, 0 updated, 1 removed, 2 unchanged",
    ]
    names = [j["name"] for j in json.loads(initialised("jobs", "list", "--json").stdout)]
    assert names == ["new", "stray"]


def test_apply_reports_every_bad_entry_and_applies_none(
    initialised: Invoke, settings: ClusterSettings, tmp_path: Path
) -> None:
    initialised(*add_args("ok1", "--schedule", "@daily"))  # would be updated by entry 1
    before = jobs_rows(settings)
    path = tmp_path / "jobs.yaml"
    path.write_text(BAD_FILE, "utf-8")
    for extra in ([], ["--prune"], ["--json"]):
        result = initialised("jobs", "apply", str(path), *extra)
        assert_bad_input(result, "file")
        line = result.stderr
        assert "entry 2 (bad2): schedule" in line and "entry 4 (bad4): tz" in line, line
        for good in ("entry 1", "entry 3", "entry 5"):
            assert good not in line
        assert jobs_rows(settings) == before


BAD_FILES = [
    ("missing.yaml", None, "file"),
    ("broken.yaml", "- name: [unclosed\n", "file"),
    ("broken.json", '[{"name": ', "file"),
    ("scalar.yaml", "just text\n", "file"),
    ("mapping.yaml", "name: x\nschedule: '@daily'\n", "file"),
    ("list_of_text.yaml", "- x\n- y\n", "file"),
    ("unknown_key.yaml", "- {name: a, schedule: '@daily', handler: 'a:b', colour: red}\n", "file"),
    ("missing_key.yaml", "- {name: a, schedule: '@daily'}\n", "file"),
    ("bad_types.yaml", "- {name: 5, schedule: '@daily', handler: 'a:b'}\n", "file"),
    ("inf.yaml", "- {name: a, schedule: '@daily', handler: 'a:b', timeout: .inf}\n", "file"),
    ("nan.yaml", "- {name: a, schedule: '@daily', handler: 'a:b', grace: .nan}\n", "file"),
    (
        "list_payload.yaml",
        "- {name: a, schedule: '@daily', handler: 'a:b', payload: [1]}\n",
        "file",
    ),
    ("nul.json", '[{"name": "a", "schedule": "@daily", "handler": "shell:a\\u0000b"}]', "file"),
    ("newline_name.yaml", '- {name: "a\\nb", schedule: "@daily", handler: "a:b"}\n', "file"),
    ("dupes.yaml", "- {name: a, schedule: '@daily', handler: 'a:b'}\n" * 2, "entry 2: name"),
]


@pytest.mark.parametrize(("filename", "text", "field"), BAD_FILES, ids=[f for f, _, _ in BAD_FILES])
def test_apply_bad_files(
    shared: Shared, tmp_path: Path, filename: str, text: str | None, field: str
) -> None:
    settings, invoke = shared
    before = jobs_rows(settings)
    path = tmp_path / filename
    if text is not None:
        path.write_text(text, "utf-8")
    assert_bad_input(invoke("jobs", "apply", str(path), "--prune"), field)
    assert jobs_rows(settings) == before


# -- pulse schedule ------------------------------------------------------------------------


def test_schedule_prints_n_aware_times(pulse: Invoke) -> None:
    after = "2031-03-29T00:00:00+00:00"  # Berlin springs forward on 30 March, 01:00 UTC
    result = pulse(
        "schedule", "30 2 * * *", "--tz", "Europe/Berlin", "--count", "4", "--after", after
    )
    assert result.exit_code == 0, result.stderr
    lines = result.stdout.splitlines()
    assert len(lines) == 4
    slots = [is_aware_iso(line) for line in lines]
    assert slots == sorted(set(slots))
    expected = parse_schedule("30 2 * * *", "Europe/Berlin").next_n(
        datetime.fromisoformat(after), 4
    )
    assert slots == expected
    assert lines[0] == "2031-03-29T02:30:00+01:00"
    assert lines[1] == "2031-03-30T03:00:00+02:00", (
        "02:30 does not exist: first instant after the gap"
    )
    assert lines[2].endswith("T02:30:00+02:00")
    as_json = json.loads(
        pulse("schedule", "@every 90m", "--count", "3", "--after", after, "--json").stdout
    )
    assert as_json == [
        "2031-03-29T01:30:00+00:00",
        "2031-03-29T03:00:00+00:00",
        "2031-03-29T04:30:00+00:00",
    ]


def test_schedule_default_after_is_now(pulse: Invoke) -> None:
    before = datetime.now(UTC)
    lines = pulse("schedule", "* * * * * *").stdout.splitlines()
    assert len(lines) == 5
    first = is_aware_iso(lines[0])
    assert before < first <= datetime.now(UTC) + timedelta(seconds=2)


BAD_SCHEDULE = [
    (["0 0 30 2 *"], "schedule"),
    (["nope"], "schedule"),
    (["@every -5s"], "schedule"),
    (["@hourly", "--tz", "Nowhere/City"], "tz"),
    (["@hourly", "--after", "yesterday"], "after"),
    (["@hourly", "--after", "2030-01-01T00:00:00"], "after"),
    (["@hourly", "--dst-skipped", "maybe"], "dst_skipped"),
]


@pytest.mark.parametrize(("args", "field"), BAD_SCHEDULE)
def test_schedule_bad_input(pulse: Invoke, args: list[str], field: str) -> None:
    assert_bad_input(pulse("schedule", *args), field)


# -- global options and settings -----------------------------------------------------------


@pytest.mark.parametrize(
    ("option", "value", "field"),
    [
        ("--schema", "Bad-Schema", "schema"),
        ("--cluster", "bad cluster!", "cluster"),
        ("--database-url", "mysql://x@y/z", "database_url"),
        ("--redis-url", "http://x", "redis_url"),
    ],
)
def test_bad_global_settings(pulse: Invoke, option: str, value: str, field: str) -> None:
    assert_bad_input(pulse(option, value, "jobs", "list"), field)


def test_flags_override_environment(
    initialised: Invoke, settings: ClusterSettings, env: dict[str, str | None]
) -> None:
    initialised(*add_args())
    other = settings.schema + "_flag"
    assert invoke(env, "--schema", other, "init").exit_code == 0
    flagged = invoke(env, "--schema", other, "jobs", "list", "--json")
    assert json.loads(flagged.stdout) == []
    assert len(json.loads(initialised("jobs", "list", "--json").stdout)) == 1


def test_shared_options_after_the_command(
    initialised: Invoke, settings: ClusterSettings, env: dict[str, str | None]
) -> None:
    other = settings.schema + "_after"
    assert invoke(env, "init", "--schema", other).exit_code == 0
    initialised(*add_args())
    # After the command beats before it, and both beat the environment.
    after = invoke(env, "--schema", settings.schema, "jobs", "list", "--json", "--schema", other)
    assert after.exit_code == 0, after.output
    assert json.loads(after.stdout) == []
    bad = invoke(env, "jobs", "list", "--database-url", "mysql://x@y/z")
    assert_bad_input(bad, "database_url")


# -- --help everywhere ---------------------------------------------------------------------


def command_paths(group: click.Group, prefix: tuple[str, ...] = ()) -> Iterator[tuple[str, ...]]:
    yield prefix
    for name, command in sorted(group.commands.items()):
        if isinstance(command, click.Group):
            yield from command_paths(command, (*prefix, name))
        else:
            yield (*prefix, name)


def test_every_command_has_help() -> None:
    paths = list(command_paths(cli))
    expected = {("init",), ("jobs", "add"), ("jobs", "apply"), ("jobs", "list"), ("jobs", "show")}
    expected |= {("jobs", v) for v in ("pause", "resume", "trigger", "remove")}
    expected |= {("runs",), ("schedule",), ("node",)}
    assert expected <= set(paths)
    env = {"PULSE_DATABASE_URL": UNREACHABLE}  # --help must not touch the database
    for path in paths:
        for flag in ("--help", "-h"):
            result = invoke(env, *path, flag)
            assert result.exit_code == 0, (path, result.output)
            assert result.stdout.startswith(f"Usage: {' '.join(('pulse', *path))}"), path
            assert "Traceback" not in result.output


# -- the real process ----------------------------------------------------------------------


def test_real_process_round_trip(settings: ClusterSettings) -> None:
    init = spawn(settings, "init", "--shards", "16").result()
    assert init.returncode == 0, init.stderr
    assert init.stdout.strip().endswith("16 shards")
    started = [
        spawn(settings, *add_args("tick", "--payload", '{"q": "it\'s"}', "--json")),
        spawn(settings, *add_args("other", "--schedule", "0 0 30 2 *")),
        spawn(
            settings, "schedule", "@daily", "--count", "3", "--after", "2030-06-01T12:00:00+02:00"
        ),
    ]
    added, bad, schedule = (p.result() for p in started)
    assert added.returncode == 0, added.stderr
    assert json.loads(added.stdout)["payload"] == {"q": "it's"}
    assert bad.returncode == 2 and bad.stdout == ""
    assert_one_line_error(bad.stderr, "invalid schedule")
    assert schedule.returncode == 0
    assert schedule.stdout.splitlines() == [
        "2030-06-02T00:00:00+00:00",
        "2030-06-03T00:00:00+00:00",
        "2030-06-04T00:00:00+00:00",
    ]
    started = [spawn(settings, "jobs", "list", "--json"), spawn(settings, *add_args("tick"))]
    listed, dup = (p.result() for p in started)
    assert [j["name"] for j in json.loads(listed.stdout)] == ["tick"]
    assert dup.returncode == 2 and dup.stdout == ""
    assert_one_line_error(dup.stderr, "invalid name", "already exists")
    assert len(jobs_rows(settings)) == 1


def test_real_process_unreachable_database(settings: ClusterSettings) -> None:
    commands = [
        ["init"],
        ["jobs", "list"],
        ["jobs", "add", "x", "--schedule", "@daily", "--handler", "a:b"],
        ["jobs", "trigger", "x"],
        ["runs", "--json"],
    ]
    started = [spawn(settings, *c, PULSE_DATABASE_URL=UNREACHABLE) for c in commands]
    for args, result in zip(commands, (p.result() for p in started), strict=True):
        assert result.returncode == 1, args
        assert result.stdout == ""
        assert_one_line_error(result.stderr, "cannot connect to Postgres", "127.0.0.1:1")
        assert "s3cret-pw" not in result.stderr, "the password is masked"
        assert "postgres:***@" in result.stderr


def test_real_process_help_and_version(settings: ClusterSettings) -> None:
    started = [
        spawn(settings, "jobs", "add", "--help", PULSE_DATABASE_URL=UNREACHABLE),
        spawn(settings, "--version"),
    ]
    helped, version = (p.result() for p in started)
    assert helped.returncode == 0 and helped.stdout.startswith("Usage: pulse jobs add")
    assert version.returncode == 0 and version.stdout.startswith("pulse, version ")
