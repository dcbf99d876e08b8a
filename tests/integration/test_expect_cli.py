"""Expectations from the command line: ``jobs add`` and job files set them, ``jobs show``
prints them with the job's health, ``runs show`` a run's metrics; bad input is one line,
exit 2, and writes nothing."""

from __future__ import annotations

import json
from pathlib import Path

import psycopg
import pytest

from cluster.settings import ClusterSettings
from tests.helpers.cli import Invoke, Shared, add_args, assert_bad_input, jobs_rows

EXPECTING = (
    "--expect-max", "10m", "--expect-min", "30s", "--deadline", "6:00",
    "--expect-baseline", "3x", "--assert", "rows>0 and errors==0", "--assert-fails",
)  # fmt: skip


def test_add_sets_every_expectation(initialised: Invoke) -> None:
    result = initialised(*add_args("nightly", *EXPECTING, "--json"))
    assert result.exit_code == 0, result.stderr
    job = json.loads(result.stdout)
    assert (job["expect_max_s"], job["expect_min_s"], job["deadline"]) == (600.0, 30.0, "06:00")
    assert (job["expect_baseline"], job["asserts"], job["assert_fails"]) == (
        3.0,
        "rows > 0 and errors == 0",
        True,
    )
    assert job["health"] == {
        "last_success": None,
        "next_slot": job["next_run_at"],
        "state": None,  # no run judged yet
        "state_at": None,
    }
    plain = json.loads(initialised(*add_args("plain", "--json")).stdout)
    assert (plain["expect_max_s"], plain["asserts"], plain["health"]["state"]) == (None, None, None)
    shown = initialised("jobs", "show", "nightly")
    assert shown.exit_code == 0, shown.stderr
    assert "deadline:         06:00" in shown.stdout
    health = shown.stdout.split("health:", 1)[1].splitlines()[0].strip()
    assert health == f"last success -, next slot {job['next_run_at']}, expectations -"


def test_a_job_file_sets_them_and_applying_it_again_changes_nothing(
    initialised: Invoke, tmp_path: Path
) -> None:
    file = tmp_path / "jobs.yaml"
    file.write_text(
        "jobs:\n"
        "  - name: export\n"
        "    schedule: '0 1 * * *'\n"
        "    handler: app.jobs:tick\n"
        "    expect_max: 10m\n"
        "    deadline: '06:00'\n"
        "    assert: rows > 0\n"
    )
    first = initialised("jobs", "apply", str(file), "--json")
    assert first.exit_code == 0, first.stderr
    assert json.loads(first.stdout)["created"] == ["export"]
    again = initialised("jobs", "apply", str(file), "--json")
    assert json.loads(again.stdout)["unchanged"] == ["export"]
    job = json.loads(initialised("jobs", "show", "export", "--json").stdout)
    assert (job["expect_max_s"], job["deadline"], job["asserts"]) == (600.0, "06:00", "rows > 0")
    file.write_text(file.read_text().replace("rows > 0", "rows > 1"))
    assert json.loads(initialised("jobs", "apply", str(file), "--json").stdout)["updated"] == [
        "export"
    ]


BAD = [
    (["--expect-min", "10m", "--expect-max", "1m"], "expect_min"),
    (["--expect-max", "0s"], "expect_max"),
    (["--expect-min", "a while"], "expect_min"),
    (["--deadline", "6am"], "deadline"),
    (["--deadline", "24:00"], "deadline"),
    (["--expect-baseline", "0.5x"], "expect_baseline"),
    (["--expect-baseline", "fast"], "expect_baseline"),
    (["--assert", "rows >"], "assert"),
    (["--assert", "Rows > 0"], "assert"),
    (["--assert", "rows > 0; rm -rf /"], "assert"),
    (["--assert", "(" * 240 + "rows > 0" + ")" * 240], "assert"),
    (["--assert-fails"], "assert_fails"),
]


@pytest.mark.parametrize(("extra", "field"), BAD, ids=[f"{f}:{e[-1]}" for e, f in BAD])
def test_bad_expectations_write_nothing(shared: Shared, extra: list[str], field: str) -> None:
    settings, invoke = shared
    before = jobs_rows(settings)
    assert_bad_input(invoke(*add_args("expecting", *extra)), field)
    assert jobs_rows(settings) == before


def test_runs_show_prints_a_runs_metrics(initialised: Invoke, settings: ClusterSettings) -> None:
    added = json.loads(initialised(*add_args("counted", "--json")).stdout)
    output = {"stdout": None, "truncated": [], "metrics": {"rows": 142.0, "lag.s": 0.5}}
    with psycopg.connect(settings.database_url, autocommit=True) as conn:
        conn.execute(
            f"INSERT INTO {settings.schema}.runs (job_id, tenant_id, job_name, scheduled_for,"
            " status, output) VALUES (%s, 'default', 'counted', '2026-01-01Z', 'succeeded', %s)",
            (added["id"], json.dumps(output)),
        )
    shown = initialised("runs", "show", "counted")
    assert shown.exit_code == 0, shown.stderr
    assert "lag.s=0.5, rows=142" in shown.stdout
    data = json.loads(initialised("runs", "show", "counted", "--json").stdout)
    assert data["metrics"] == {"rows": 142.0, "lag.s": 0.5}


def test_removing_every_expectation_clears_the_health(
    initialised: Invoke, settings: ClusterSettings, tmp_path: Path
) -> None:
    entry = "jobs:\n  - name: judged\n    schedule: '*/5 * * * *'\n    handler: app.jobs:tick\n"
    file = tmp_path / "jobs.yaml"
    file.write_text(entry + "    expect_max: 1m\n")
    assert initialised("jobs", "apply", str(file)).exit_code == 0
    with psycopg.connect(settings.database_url, autocommit=True) as conn:
        conn.execute(
            f"UPDATE {settings.schema}.jobs SET expect_state = 'slow', expect_state_at = now()"
            " WHERE name = 'judged'"
        )
    file.write_text(entry + "    expect_max: 2m\n")  # still expecting: the state stays
    assert initialised("jobs", "apply", str(file)).exit_code == 0
    job = json.loads(initialised("jobs", "show", "judged", "--json").stdout)
    assert (job["expect_max_s"], job["health"]["state"]) == (120.0, "slow")
    file.write_text(entry)
    assert initialised("jobs", "apply", str(file)).exit_code == 0
    job = json.loads(initialised("jobs", "show", "judged", "--json").stdout)
    assert (job["expect_max_s"], job["health"]["state"]) == (None, None)
