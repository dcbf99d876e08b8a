"""`pulse jobs add --zones` and job files' `zones`: pinning, and bad input refused whole."""

from __future__ import annotations

import json
from pathlib import Path

import psycopg
import pytest

from cluster.settings import ClusterSettings
from ring.zones import PARKED_SHARD, space_shards
from tests.helpers.cli import Invoke


@pytest.fixture
def pulse(initialised: Invoke) -> object:
    return initialised


def _jobs(settings: ClusterSettings) -> list[tuple[str, list[str] | None, int]]:
    with psycopg.connect(settings.database_url, options=f"-c search_path={settings.schema}") as c:
        rows = c.execute("SELECT name, zones, shard_id FROM jobs ORDER BY name").fetchall()
    return [(r[0], r[1], r[2]) for r in rows]


ADD = ("jobs", "add", "j", "--schedule", "@hourly", "--handler", "m:f")


@pytest.mark.parametrize("zones", ["", " ", "a,,b", "a b", "a,b/c", "x" * 65])
def test_a_bad_zone_list_is_refused_and_nothing_written(
    pulse: object, settings: ClusterSettings, zones: str
) -> None:
    result = pulse(*ADD, "--zones", zones)  # type: ignore[operator]
    assert result.exit_code == 2, result.output
    assert len(result.output.strip().splitlines()) == 1 and "zones" in result.output
    assert _jobs(settings) == []


def test_pinned_jobs_live_in_their_zone_sets_space(
    pulse: object, settings: ClusterSettings, tmp_path: Path
) -> None:
    result = pulse(*ADD, "--zones", "b,a,b", "--json")  # type: ignore[operator]
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["zones"] == ["a", "b"]
    jobs = tmp_path / "jobs.yaml"
    jobs.write_text(
        "jobs:\n"
        "  - {name: j, schedule: '@hourly', handler: 'm:f', zones: [a, b]}\n"
        "  - {name: k, schedule: '@hourly', handler: 'm:f', zones: c}\n"
        "  - {name: free, schedule: '@hourly', handler: 'm:f'}\n"
    )
    assert pulse("jobs", "apply", str(jobs)).exit_code == 0  # type: ignore[operator]
    rows = {name: (zones, shard) for name, zones, shard in _jobs(settings)}
    assert rows["j"][0] == ["a", "b"] and rows["j"][1] in space_shards(1)
    assert rows["k"][0] == ["c"] and rows["k"][1] in space_shards(2)
    assert rows["free"][0] is None and rows["free"][1] < 16
    jobs.write_text("jobs:\n  - {name: k, schedule: '@hourly', handler: 'm:f'}\n")
    assert pulse("jobs", "apply", str(jobs)).exit_code == 0  # type: ignore[operator]
    rows = {name: (zones, shard) for name, zones, shard in _jobs(settings)}
    assert rows["k"][0] is None and rows["k"][1] < 16, "unpinned: back in the default shards"


@pytest.mark.parametrize("zones", ["a", "a,a"])
def test_each_zone_with_a_single_zone_is_refused(
    pulse: object, settings: ClusterSettings, zones: str
) -> None:
    result = pulse(*ADD, "--each-zone", "--zones", zones)  # type: ignore[operator]
    assert result.exit_code == 2, result.output
    assert len(result.output.strip().splitlines()) == 1 and "each_zone" in result.output
    assert _jobs(settings) == []


def test_an_each_zone_job_is_parked(pulse: object, settings: ClusterSettings) -> None:
    result = pulse(*ADD, "--each-zone", "--json")  # type: ignore[operator]
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["each_zone"] is True
    assert _jobs(settings) == [("j", None, PARKED_SHARD)]
    assert pulse(*ADD[:2], "k", *ADD[3:], "--each-zone", "--zones", "b,a").exit_code == 0  # type: ignore[operator]
    assert _jobs(settings)[1] == ("k", ["a", "b"], PARKED_SHARD)


@pytest.mark.parametrize(
    "command",
    [
        ("jobs", "trigger", "j"),
        ("jobs", "backfill", "j", "--from", "2020-01-01T00:00:00Z", "--to", "2020-01-01T01:00:00Z"),
    ],
    ids=["trigger", "backfill"],
)
def test_an_each_zone_job_runs_through_its_children_only(
    pulse: object, settings: ClusterSettings, command: tuple[str, ...]
) -> None:
    """A trigger or a backfill of an each-zone job is refused, one line naming its children,
    and nothing is written: no node claims its parked row, so the trigger made it due where
    nothing would run it, and a backfill request there would wait for ever."""
    assert pulse(*ADD, "--each-zone").exit_code == 0  # type: ignore[operator]
    result = pulse(*command)  # type: ignore[operator]
    assert result.exit_code == 2, result.output
    assert len(result.output.strip().splitlines()) == 1 and "child job per zone" in result.output
    with psycopg.connect(settings.database_url, options=f"-c search_path={settings.schema}") as c:
        assert c.execute("SELECT count(*) FROM backfills").fetchone() == (0,)
        row = c.execute("SELECT next_run_at, status FROM jobs WHERE name = 'j'").fetchone()
    assert row is not None and row[0].year == 9999 and row[1] == "idle"


@pytest.mark.parametrize("before", ["@after:up", "@hourly"], ids=["chained", "plain"])
def test_a_job_made_each_zone_is_never_due_itself(
    pulse: object, settings: ClusterSettings, tmp_path: Path, before: str
) -> None:
    """An apply that makes a job an each-zone one parks it, never due: a chained job's
    gate, written after the park, made it due at its slot again in the shard no node
    claims."""
    path = tmp_path / "jobs.json"
    up = {"name": "up", "schedule": "@hourly", "handler": "m:f"}
    path.write_text(json.dumps([up, {"name": "j", "schedule": before, "handler": "m:f"}]))
    assert pulse("jobs", "apply", str(path)).exit_code == 0  # type: ignore[operator]
    each = {"name": "j", "schedule": "@hourly", "handler": "m:f", "each_zone": True}
    path.write_text(json.dumps([up, each]))
    assert pulse("jobs", "apply", str(path)).exit_code == 0  # type: ignore[operator]
    with psycopg.connect(settings.database_url, options=f"-c search_path={settings.schema}") as c:
        row = c.execute("SELECT next_run_at, shard_id FROM jobs WHERE name = 'j'").fetchone()
    assert row is not None and (row[0].year, row[1]) == (9999, PARKED_SHARD)
