"""``pulse import crontab | celery-beat | k8s-cronjob`` on real files (tests/imports/): the
job file written, what is listed as not mapped (with its line or entry), and the file
applied by ``pulse jobs apply`` to a real database; ``--watch`` files as written."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.helpers import REPO
from tests.helpers.cli import (
    Invoke,
    assert_bad_input,
    assert_one_line_error,
)
from tests.helpers.cli import invoke as invoke_in

FILES = REPO / "tests" / "imports"
CRONTAB = str(FILES / "crontab")
CRONJOBS = str(FILES / "cronjobs.yaml")
BEAT = "tests.imports.beat_app"


@pytest.fixture
def pulse(initialised: Invoke) -> Invoke:
    return initialised


def not_mapped(stderr: str) -> list[str]:
    return [
        line.removeprefix("not mapped: ") for line in stderr.splitlines() if "not mapped: " in line
    ]


def jobs_of(text: str) -> dict[str, dict[str, Any]]:
    return {job["name"]: job for job in yaml.safe_load(text)["jobs"]}


def applied(pulse: Invoke, tmp_path: Path, text: str) -> dict[str, dict[str, Any]]:
    """Apply the job file; every job as ``pulse jobs list --json`` shows it."""
    path = tmp_path / "imported.yaml"
    path.write_text(text, "utf-8")
    result = pulse("jobs", "apply", str(path))
    assert result.exit_code == 0, result.output
    listed = pulse("jobs", "list", "--json")
    return {job["name"]: job for job in json.loads(listed.stdout)}


def test_crontab_maps_zones_and_variables_refuses_reboot_and_applies(
    pulse: Invoke, tmp_path: Path
) -> None:
    result = pulse("import", "crontab", CRONTAB, "--out", str(tmp_path / "jobs.yaml"))
    assert result.exit_code == 0, result.output
    assert result.stdout == ""
    text = (tmp_path / "jobs.yaml").read_text("utf-8")
    found = jobs_of(text)
    assert list(found) == ["backup", "curl", "rotate-sh", "date"]
    assert found["backup"]["tz"] == "Europe/Paris"  # CRON_TZ= applies to the lines after it
    assert found["curl"]["schedule"] == "*/15 9-17 * * mon-fri"
    assert (found["rotate-sh"]["schedule"], found["rotate-sh"]["tz"]) == (
        "@daily",
        "America/New_York",
    )
    shell = found["date"]["handler"]["shell"]
    # A plain variable is exported; a secret's value never reaches the file, only its name.
    assert shell["command"] == "export PATH=/usr/local/bin:/usr/bin:/bin; date +%F >> /tmp/dates"
    assert shell["env"] == ["API_TOKEN"]
    assert "abc123" not in text
    problems = not_mapped(result.stderr)
    assert [p.split(":", 1)[0] for p in problems] == [
        "line 4", "line 5", "line 8", "line 13", "line 14",
    ]  # fmt: skip
    assert "MAILTO" in problems[0] and "--format email" in problems[0]
    assert problems[2].startswith("line 8: @reboot refused: it runs when one host boots")
    assert "unescaped %" in problems[3]
    assert "schedule" in problems[4] and "out of range" in problems[4]
    assert result.stderr.splitlines()[-1] == (
        f"imported 4 jobs from {CRONTAB}, 5 not mapped (listed above)"
    )
    jobs = applied(pulse, tmp_path, text)
    assert set(jobs) == {"backup", "curl", "rotate-sh", "date"}
    assert jobs["backup"]["tz"] == "Europe/Paris"
    assert jobs["rotate-sh"]["tz"] == "America/New_York"


def test_crontab_from_stdin_with_prefix_tenant_and_watch_as_written() -> None:
    crontab = Path(CRONTAB).read_text("utf-8")
    # As an operator runs it: `crontab -l | pulse import crontab - ...`, a real process.
    env = {k: v for k, v in os.environ.items() if not k.startswith("PULSE_")}
    command = [sys.executable, "-m", "node", "import", "crontab", "-", "--watch"]
    done = subprocess.run(
        [*command, "--prefix", "legacy-", "--tenant", "acme"],
        input=crontab, capture_output=True, text=True, cwd=REPO, env=env, timeout=60, check=False,
    )  # fmt: skip
    out, err = done.stdout, done.stderr
    assert done.returncode == 0, err
    found = jobs_of(out)
    assert list(found) == ["legacy-backup", "legacy-curl", "legacy-rotate-sh", "legacy-date"]
    assert found["legacy-backup"] == {
        "name": "legacy-backup",
        "watch": True,
        "tenant": "acme",
        "schedule": "30 2 * * *",
        "tz": "Europe/Paris",
    }
    assert all("handler" not in job for job in found.values())
    assert "@reboot refused" in err
    assert "note: --watch: handlers, payloads and run policies" in err


def test_nothing_mapped_exits_2_and_writes_nothing(tmp_path: Path) -> None:
    crontab = tmp_path / "crontab"
    crontab.write_text("@reboot /usr/bin/warm\nMAILTO=ops@example.com\n", "utf-8")
    out = tmp_path / "jobs.yaml"
    result = invoke_in({}, "import", "crontab", str(crontab), "--out", str(out))
    assert result.exit_code == 2
    assert not out.exists()
    assert result.stdout == ""
    lines = result.stderr.splitlines()
    assert lines[-1] == f"pulse: nothing in {crontab} could be mapped to a job"
    assert lines[0].startswith("not mapped: line 1: @reboot refused")
    assert lines[1].startswith("not mapped: line 2: MAILTO")


def test_urls_and_dsns_with_passwords_are_imported_as_env_names_never_values(
    tmp_path: Path,
) -> None:
    crontab = tmp_path / "crontab"
    crontab.write_text(
        "DATABASE_URL=postgresql://app:s3cret-1@db/app\n"
        "SENTRY_DSN=https://k3y-2@sentry.example.com/4\n"
        "TARGET=s3://AKIA:s3cret-3@bucket/backups\n"
        "LOG_LEVEL=info\n"
        "0 3 * * * /usr/local/bin/backup\n",
        "utf-8",
    )
    result = invoke_in({}, "import", "crontab", str(crontab))
    assert result.exit_code == 0, result.output
    assert not any(s in result.output for s in ("s3cret-1", "k3y-2", "s3cret-3"))
    shell = jobs_of(result.stdout)["backup"]["handler"]["shell"]
    assert shell["env"] == ["DATABASE_URL", "SENTRY_DSN", "TARGET"]
    assert shell["command"] == "export LOG_LEVEL=info; /usr/local/bin/backup"
    told = [line for line in result.stderr.splitlines() if "set it on every node" in line]
    assert len(told) == 3 and "DATABASE_URL" in told[0]


@pytest.mark.parametrize(
    ("args", "field"),
    [
        (("crontab", "/nonexistent/crontab"), "file"),
        (("k8s-cronjob", "/nonexistent/cronjobs.yaml"), "file"),
        (("celery-beat", "tests.imports.no_such_module"), "module"),
        (("crontab", CRONTAB, "--tenant", ""), "tenant"),
    ],
)
def test_bad_input_is_one_line_naming_the_field(args: tuple[str, ...], field: str) -> None:
    assert_bad_input(invoke_in({}, "import", *args), field)


def test_k8s_cronjobs_map_policies_and_apply(pulse: Invoke, tmp_path: Path) -> None:
    result = pulse("import", "k8s-cronjob", CRONJOBS, "--prefix", "k8s-")
    assert result.exit_code == 0, result.output
    found = jobs_of(result.stdout)
    assert list(found) == ["k8s-nightly-report", "k8s-cache-warmer"]
    report = found["k8s-nightly-report"]
    assert report["handler"] == {
        "shell": {
            "argv": ["env", "REPORT_BUCKET=s3://reports/daily", "/app/report", "--since",
                     "24h", "--format=csv"],
            "env": ["DB_PASSWORD"],
        }
    }  # fmt: skip
    assert {k: report[k] for k in ("tz", "overlap", "catch_up", "grace", "retries", "timeout")} == {
        "tz": "Europe/London",
        "overlap": "forbid",
        "catch_up": "skip",
        "grace": "300s",
        "retries": 2,
        "timeout": "1800s",
    }
    warmer = found["k8s-cache-warmer"]
    assert (warmer["overlap"], warmer["paused"], warmer["schedule"]) == ("replace", True, "@hourly")
    problems = not_mapped(result.stderr)
    assert "document 3: kind Service is not a CronJob" in problems
    assert any(
        p.startswith("document 4 (entrypoint-only): not imported: no command") for p in problems
    )
    assert any("image registry.example.com/report:1.4 is not mapped" in p for p in problems)
    assert "document 2 (cache-warmer): volumes is not mapped" in problems
    assert any("successfulJobsHistoryLimit is not mapped" in p for p in problems)
    jobs = applied(pulse, tmp_path, result.stdout)
    assert jobs["k8s-nightly-report"]["overlap"] == "forbid"
    assert jobs["k8s-nightly-report"]["catch_up"] == "skip"
    assert jobs["k8s-nightly-report"]["grace_s"] == 300.0
    assert jobs["k8s-cache-warmer"]["status"] == "paused"


def test_celery_beat_maps_crontab_and_intervals_refuses_solar_and_applies(
    pulse: Invoke, tmp_path: Path
) -> None:
    result = pulse("import", "celery-beat", BEAT, "--broker", "main")
    assert result.exit_code == 0, result.output
    found = jobs_of(result.stdout)
    assert list(found) == [
        "nightly-invoices", "office-hours-sync", "heartbeat", "hourly-rollup", "every-5-minutes",
    ]  # fmt: skip
    invoices = found["nightly-invoices"]
    assert invoices["schedule"] == "30 2 * * *"
    assert invoices["tz"] == "Europe/Berlin"
    assert invoices["handler"] == {
        "celery": {"task": "billing.tasks.invoices", "broker": "main", "queue": "billing"}
    }
    assert invoices["payload"] == {"region": "eu", "dry_run": False}
    assert found["office-hours-sync"]["schedule"] == "0,15,30,45 9-17 * * 1-5"
    assert found["heartbeat"]["schedule"] == "@every 30s"
    assert found["hourly-rollup"]["schedule"] == "@every 1h"
    assert found["every-5-minutes"]["schedule"] == "@every 5m"
    problems = not_mapped(result.stderr)
    assert problems == [
        "entry 'hourly-rollup': option 'expires' is not mapped",
        "entry 'at-sunrise': solar schedules are refused: Pulse has no sunrise or sunset events",
        "entry 'first-monday': crontab restricts both day_of_month and day_of_week: Celery runs "
        "on days matching both, cron on days matching either; split it into two entries",
        "entry 'with-args': positional args are refused: a celery: job sends its payload as "
        "keyword arguments; give them as kwargs",
    ]
    # Applied to a real database: the handler names the broker, the payload is kept.
    jobs = applied(pulse, tmp_path, result.stdout)
    assert set(jobs) == set(found)
    shown = json.loads(pulse("jobs", "show", "nightly-invoices", "--json").stdout)
    assert shown["payload"] == {"region": "eu", "dry_run": False}
    assert shown["tz"] == "Europe/Berlin"
    assert shown["handler"].startswith("celery:")


def test_k8s_watch_keeps_only_when_runs_are_expected() -> None:
    result = invoke_in({}, "import", "k8s-cronjob", CRONJOBS, "--watch")
    assert result.exit_code == 0, result.output
    assert jobs_of(result.stdout) == {
        "nightly-report": {
            "name": "nightly-report", "watch": True, "schedule": "15 3 * * *",
            "tz": "Europe/London",
        },
        "cache-warmer": {
            "name": "cache-warmer", "watch": True, "schedule": "@hourly", "paused": True,
        },
    }  # fmt: skip


def test_celery_beat_watch_needs_no_broker() -> None:
    result = invoke_in({}, "import", "celery-beat", BEAT, "--watch")
    assert result.exit_code == 0, result.output
    found = jobs_of(result.stdout)
    assert found["heartbeat"] == {
        "name": "heartbeat", "watch": True, "schedule": "@every 30s", "tz": "Europe/Berlin",
    }  # fmt: skip


def test_an_app_module_that_fails_to_import_is_one_line(tmp_path: Path) -> None:
    result = invoke_in({}, "import", "celery-beat", "tests.imports.beat_app:nothing")
    assert_one_line_error(result.stderr, "invalid module", "no attribute 'nothing'")
    assert result.exit_code == 2


def test_celery_beat_reads_a_config_module() -> None:
    result = invoke_in({}, "import", "celery-beat", "tests.imports.beat_config")
    assert result.exit_code == 0, result.output
    assert jobs_of(result.stdout) == {
        "morning-digest": {
            "name": "morning-digest",
            "schedule": "0 7 * * *",
            "handler": {"celery": {"task": "mail.tasks.digest"}},
            "tz": "Asia/Tokyo",
        }
    }
    assert not_mapped(result.stderr) == []
