"""`pulse jobs add --each-node` and job files' `each_node`: written, shown, and bad input
refused whole (one line, exit 2, nothing written)."""

from __future__ import annotations

import json
from pathlib import Path

import psycopg
import pytest

from cluster.settings import ClusterSettings
from tests.helpers.cli import Invoke

ADD = ("jobs", "add", "j", "--schedule", "@hourly", "--handler", "m:f", "--each-node")


@pytest.fixture
def pulse(initialised: Invoke) -> Invoke:
    return initialised


def _jobs(settings: ClusterSettings) -> list[tuple[str, bool, list[str] | None]]:
    with psycopg.connect(settings.database_url, options=f"-c search_path={settings.schema}") as c:
        rows = c.execute("SELECT name, each_node, zones FROM jobs ORDER BY name").fetchall()
    return [(r[0], r[1], r[2]) for r in rows]


def test_an_every_node_job_is_written_and_shown(
    pulse: Invoke, settings: ClusterSettings, tmp_path: Path
) -> None:
    result = pulse(*ADD, "--zones", "b,a", "--json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["each_node"] is True
    jobs = tmp_path / "jobs.yaml"
    jobs.write_text("jobs:\n  - {name: k, schedule: '@hourly', handler: 'm:f', each_node: true}\n")
    assert pulse("jobs", "apply", str(jobs)).exit_code == 0
    assert _jobs(settings) == [("j", True, ["a", "b"]), ("k", True, None)]
    shown = pulse("jobs", "show", "k")
    assert "each_node:        True" in shown.output, shown.output


@pytest.mark.parametrize(
    ("more", "field"),
    [
        (("--overlap", "allow"), "each_node"),
        (("--each-zone",), "each_node"),
        (("--zones", "a,,b"), "zones"),
        (("--max-runs", "2"), "each_node"),
        (("--uses", "warehouse"), "each_node"),
    ],
)
def test_bad_input_is_one_line_exit_2_and_nothing_written(
    pulse: Invoke, settings: ClusterSettings, more: tuple[str, ...], field: str
) -> None:
    result = pulse(*ADD, *more)
    assert result.exit_code == 2, result.output
    assert len(result.output.strip().splitlines()) == 1 and field in result.output
    assert _jobs(settings) == []


def test_a_chained_every_node_job_is_refused(pulse: Invoke, settings: ClusterSettings) -> None:
    assert pulse("jobs", "add", "up", "--schedule", "@hourly", "--handler", "m:f").exit_code == 0
    result = pulse(
        "jobs", "add", "down", "--schedule", "@after:up", "--handler", "m:f", "--each-node"
    )
    assert result.exit_code == 2, result.output
    assert "@after:" in result.output and len(result.output.strip().splitlines()) == 1
    assert [name for name, _, _ in _jobs(settings)] == ["up"]
