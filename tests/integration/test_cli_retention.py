"""`pulse config show|set`, `pulse runs prune` and `pulse node --prune-interval` with good
and bad input: exit codes, one-line errors naming the key, nothing written on bad input."""

from __future__ import annotations

import json
from typing import Any

import psycopg
import pytest

from cluster.settings import ClusterSettings
from tests.helpers.cli import (
    Invoke,
    assert_bad_input,
    assert_one_line_error,
    invoke,
    spawn,
)

DEFAULTS = {
    "keep_for": "30d",
    "keep_runs": 1000,
    "keep_failed_for": "90d",
    "api.handlers": "",
    "api.env": "",
    "egress.allow": "",
    "egress.nat64": "",
    "api.http_body": "drop",
    "celery.brokers": "",
    "smtp.host": "",
    "smtp.port": "",
    "smtp.tls": "starttls",
    "smtp.user": "",
    "smtp.password": "",
    "smtp.from": "",
}


@pytest.fixture
def pulse(initialised: Invoke) -> Any:
    return initialised


def config_rows(settings: ClusterSettings) -> list[tuple[Any, ...]]:
    with psycopg.connect(settings.database_url, autocommit=True) as conn:
        return conn.execute(f"SELECT * FROM {settings.schema}.config ORDER BY key").fetchall()


def sql(settings: ClusterSettings, statement: str) -> list[tuple[Any, ...]]:
    with psycopg.connect(settings.database_url, autocommit=True) as conn:
        conn.execute(f"SET search_path TO {settings.schema}")
        cur = conn.execute(statement.encode())
        return cur.fetchall() if cur.description else []


def test_init_seeds_the_defaults_that_show_prints(pulse: Any) -> None:
    result = pulse("config", "show", "--json")
    assert result.exit_code == 0, result.stderr
    assert json.loads(result.stdout) == DEFAULTS
    text = pulse("config", "show")
    assert text.exit_code == 0
    lines = text.stdout.splitlines()
    assert lines[0].split() == ["KEY", "VALUE", "UPDATED"]
    assert [line.split()[:2] for line in lines[1:4]] == [
        ["keep_for", "30d"],
        ["keep_runs", "1000"],
        ["keep_failed_for", "90d"],
    ]
    assert lines[4].split()[0] == "api.handlers"
    assert lines[5].split()[0] == "api.env"


def test_set_stores_the_canonical_value_and_init_keeps_it(
    pulse: Any, settings: ClusterSettings
) -> None:
    for key, value, stored in (
        ("keep_for", "720h", "30d"),
        ("keep_for", "7d", "7d"),
        ("keep_runs", "50", "50"),
        ("keep_failed_for", "1d12h", "1d12h"),
    ):
        result = pulse("config", "set", key, value)
        assert result.exit_code == 0, result.stderr
        assert result.stdout == f"{key} = {stored}\n"
    assert pulse("init").exit_code == 0
    shown = json.loads(pulse("config", "show", "--json").stdout)
    assert shown == {
        **DEFAULTS,
        "keep_for": "7d",
        "keep_runs": 50,
        "keep_failed_for": "1d12h",
    }
    assert len(config_rows(settings)) == 3  # the other keys are shown at their defaults


@pytest.mark.parametrize(
    ("args", "field"),
    [
        (["keep_for", "0s"], "keep_for"),
        (["keep_for", "-1d"], "keep_for"),
        (["keep_for", "soon"], "keep_for"),
        (["keep_for", "99999d"], "keep_for"),
        (["keep_failed_for", "0"], "keep_failed_for"),
        (["keep_runs", "0"], "keep_runs"),
        (["keep_runs", "-3"], "keep_runs"),
        (["keep_runs", "1.5"], "keep_runs"),
        (["keep_runs", "many"], "keep_runs"),
        (["keep_forever", "1d"], "keep_forever"),
        (["KEEP_FOR", "1d"], "KEEP_FOR"),
        (["egress.allow", "10.0.0.0/33"], "egress.allow"),
        (["egress.allow", "intranet"], "egress.allow"),
        (["api.http_body", "sometimes"], "api.http_body"),
        (["celery.brokers", "main=redis://:hunter2@broker:6379/0"], "celery.brokers"),
        (["celery.brokers", "redis://broker:6379/0"], "celery.brokers"),
        (["smtp.password", "hunter2"], "smtp.password"),
        (["smtp.tls", "ssl"], "smtp.tls"),
    ],
)
def test_bad_input_names_the_key_and_writes_nothing(
    pulse: Any, settings: ClusterSettings, args: list[str], field: str
) -> None:
    before = config_rows(settings)
    result = pulse("config", "set", *args)
    assert_bad_input(result, field)
    assert "hunter2" not in result.output + result.stderr
    assert config_rows(settings) == before


def test_missing_arguments_are_usage_errors(pulse: Any, settings: ClusterSettings) -> None:
    before = config_rows(settings)
    for args in (["config", "set", "keep_for"], ["config", "set"], ["config", "show", "--nope"]):
        result = pulse(*args)
        assert result.exit_code == 2, (args, result.output)
        assert_one_line_error(result.stderr)
    assert config_rows(settings) == before


def test_an_uninitialised_schema_is_one_line_exit_1(settings: ClusterSettings) -> None:
    for args in (["config", "show"], ["config", "set", "keep_runs", "5"], ["runs", "prune"]):
        result = invoke(settings, *args)
        assert result.exit_code == 1, (args, result.output)
        assert_one_line_error(result.stderr, "pulse init")


def test_runs_prune_counts_then_removes(pulse: Any, settings: ClusterSettings) -> None:
    add = ["jobs", "add", "j", "--schedule", "@every 1m", "--handler", "app.jobs:tick"]
    assert pulse(*add, "--keep-for", "1h").exit_code == 0
    assert pulse(*add[:2], "k", *add[3:], "--keep-runs", "2").exit_code == 0
    sql(
        settings,
        "INSERT INTO runs (job_id, tenant_id, job_name, scheduled_for, status)"
        " SELECT j.id, j.tenant_id, j.name, now() - g * interval '1 minute' - interval '1s',"
        "        CASE WHEN g % 2 = 0 THEN 'failed' ELSE 'succeeded' END"
        " FROM jobs j CROSS JOIN generate_series(0, 119) AS g",
    )
    # j: 60 of 120 older than 1h, of which the 30 failed ones are kept (90d); k: all but 2.
    dry = pulse("runs", "prune", "--dry-run", "--json")
    assert dry.exit_code == 0, dry.stderr
    assert json.loads(dry.stdout) == {"would_remove": 30 + 118}
    assert sql(settings, "SELECT count(*) FROM runs") == [(240,)]
    text = pulse("runs", "prune", "--dry-run")
    assert text.stdout == "would remove 148 runs\n"
    done = pulse("runs", "prune", "--json")
    assert json.loads(done.stdout) == {"removed": 148}
    assert sql(settings, "SELECT job_name, count(*) FROM runs GROUP BY 1 ORDER BY 1") == [
        ("j", 90),
        ("k", 2),
    ]
    again = pulse("runs", "prune")
    assert (again.exit_code, again.stdout) == (0, "removed 0 runs\n")


def test_runs_prune_rejects_unknown_options(pulse: Any, settings: ClusterSettings) -> None:
    result = pulse("runs", "prune", "--keep-for", "1d")
    assert result.exit_code == 2
    assert_one_line_error(result.stderr, "--keep-for")


@pytest.mark.parametrize("value", ["-5s", "soon", "", "500ms"])
def test_node_refuses_a_bad_prune_interval(settings: ClusterSettings, value: str) -> None:
    result = invoke(settings, "node", f"--prune-interval={value}")
    assert_bad_input(result, "prune-interval")


def test_the_real_cli_prints_one_line(settings: ClusterSettings) -> None:
    assert spawn(settings, "init").result().returncode == 0
    bad = spawn(settings, "config", "set", "keep_runs", "none").result()
    assert bad.returncode == 2 and bad.stdout == ""
    assert_one_line_error(bad.stderr, "invalid keep_runs")
    good = spawn(settings, "config", "set", "keep_runs", "10").result()
    assert (good.returncode, good.stdout) == (0, "keep_runs = 10\n")
