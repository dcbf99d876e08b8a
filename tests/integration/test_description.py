"""A job's description, free text set with ``--description``, in job files, API bodies
(the job-file parsing, ``JobSpec.from_mapping``) and ``Registry``: shown by ``jobs list`` and
``jobs show``, recorded and rolled back by revisions, and bad input refused in one line with
nothing written. (Each-zone children copy it as declared: tests/unit/test_job_options.py.)"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from cluster.jobs.registry import Registry
from cluster.jobs.spec import JobSpec
from cluster.settings import ClusterSettings
from tests.helpers.cli import Invoke, add_args, assert_bad_input, jobs_rows

NIGHTLY = "Exports the day's invoices to the ledger.\nOwner: billing."


def invoices() -> None:
    """A handler for the Registry below."""


def shown(pulse: Invoke, name: str) -> dict[str, Any]:
    result = pulse("jobs", "show", name, "--json")
    assert result.exit_code == 0, result.output
    data: dict[str, Any] = json.loads(result.stdout)
    return data


def test_the_cli_sets_it_and_list_and_show_print_it(initialised: Invoke) -> None:
    added = initialised(*add_args("export", "--description", f"  {NIGHTLY} "), "--json")
    assert added.exit_code == 0, added.output
    assert json.loads(added.stdout)["description"] == NIGHTLY  # blanks around it dropped
    assert initialised(*add_args("plain")).exit_code == 0
    assert shown(initialised, "plain")["description"] is None
    listed = initialised("jobs", "list").stdout.splitlines()
    assert listed[0].split()[-1] == "DESCRIPTION"
    assert listed[1].endswith("Exports the day's invoices to the ledger.")  # its first line
    as_json = json.loads(initialised("jobs", "list", "--json").stdout)
    assert [j["description"] for j in as_json] == [NIGHTLY, None]
    text = initialised("jobs", "show", "export").stdout
    assert "description:      Exports the day's invoices" in text
    assert initialised("jobs", "remove", "export").exit_code == 0
    assert "DESCRIPTION" not in initialised("jobs", "list").stdout  # no job has one


def test_a_job_file_changes_it_as_a_revision_and_rollback_restores_it(
    initialised: Invoke, tmp_path: Path
) -> None:
    path = tmp_path / "jobs.json"
    entry = {"name": "export", "schedule": "@daily", "handler": "app.jobs:export"}
    path.write_text(json.dumps([{**entry, "description": "v1"}]), "utf-8")
    assert initialised("jobs", "apply", str(path)).exit_code == 0
    path.write_text(json.dumps([{**entry, "description": "v2", "retries": 2}]), "utf-8")
    plan = initialised("jobs", "apply", str(path), "--plan", "--json")
    (planned,) = json.loads(plan.stdout)["jobs"]
    assert planned["changes"] == {"description": ["v1", "v2"], "retries": [0, 2]}
    assert initialised("jobs", "apply", str(path)).exit_code == 0
    revisions = json.loads(initialised("jobs", "history", "export", "--json").stdout)
    latest = revisions["revisions"][0]
    assert latest["diff"] == {"description": ["v1", "v2"], "retries": [0, 2]}
    assert latest["definition"]["description"] == "v2"
    assert initialised("jobs", "rollback", "export", "--to", "1").exit_code == 0
    restored = shown(initialised, "export")
    assert (restored["description"], restored["retries"]) == ("v1", 0)


def test_registry_and_api_bodies_take_it_as_a_job_file_does() -> None:
    registry = Registry()
    registry.cron("@hourly", description="Hourly invoices")(invoices)
    (spec,) = registry.specs()
    assert spec.description == "Hourly invoices"
    body = {"name": "x", "schedule": "@hourly", "handler": "m:f", "description": "From the API"}
    assert JobSpec.from_mapping(body).description == "From the API"  # what POST /api/jobs reads
    assert JobSpec.from_mapping({**body, "description": "  "}).description is None


@pytest.mark.parametrize(
    ("value", "problem"),
    [("x" * 1001, "longer than 1000 characters"), ("bad\x00text", "NUL")],
)
def test_bad_input_is_one_line_and_nothing_is_written(
    initialised: Invoke, settings: ClusterSettings, tmp_path: Path, value: str, problem: str
) -> None:
    result = initialised(*add_args("export", "--description", value))
    assert_bad_input(result, "description")
    assert problem in result.stderr
    path = tmp_path / "jobs.json"
    entry = {"name": "export", "schedule": "@daily", "handler": "m:f", "description": 7}
    path.write_text(json.dumps([entry]), "utf-8")
    from_file = initialised("jobs", "apply", str(path))
    assert from_file.exit_code == 2 and "description: must be text" in from_file.stderr
    assert jobs_rows(settings) == []
