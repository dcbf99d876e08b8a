"""`pulse jobs add --after`, `jobs show` and `jobs graph`: what an operator sees of the
dependencies between jobs, and bad edges refused in one line with exit 2, nothing written."""

from __future__ import annotations

import json
from pathlib import Path

from cluster.settings import ClusterSettings
from tests.helpers.cli import (
    GATED_SHOW_KEYS,
    HANDLER,
    SHOW_KEYS,
    Invoke,
    assert_bad_input,
    jobs_rows,
)


def add(pulse: Invoke, name: str, *extra: str) -> None:
    extra = extra if "--schedule" in extra else ("--schedule", "@hourly", *extra)
    result = pulse("jobs", "add", name, "--handler", HANDLER, *extra)
    assert result.exit_code == 0, result.output


def test_show_and_graph_name_the_edges(initialised: Invoke) -> None:
    add(initialised, "extract")
    add(initialised, "load", "--after", "extract", "--after-timeout", "2h")
    add(initialised, "report", "--after", "load", "--after-failure", "skip")
    shown = initialised("jobs", "show", "load", "--json")
    assert shown.exit_code == 0, shown.output
    data = json.loads(shown.stdout)
    assert set(data) == SHOW_KEYS | GATED_SHOW_KEYS
    assert (data["upstreams"], data["downstreams"]) == (["extract"], ["report"])
    assert (data["after_match"], data["after_timeout_s"], data["after_failure"]) == (
        "same",
        7200.0,
        "block",
    )
    assert data["waits_for"].startswith("upstream extract's slot ")
    assert data["waits_for"].endswith(" has not run yet")
    assert data["waits_until"] is not None  # its after-timeout
    text = initialised("jobs", "show", "load").stdout
    assert "upstreams:        extract" in text and "waits_for:" in text
    graph = initialised("jobs", "graph")
    assert graph.stdout.splitlines() == [
        "extract -> load  (same)",
        "load -> report  (same)",
    ]
    dot = initialised("jobs", "graph", "--dot").stdout
    assert '"extract" -> "load" [label="same"];' in dot and dot.startswith('digraph "default" {')


def test_bad_edges_exit_2_and_write_nothing(settings: ClusterSettings, initialised: Invoke) -> None:
    add(initialised, "extract", "--schedule", "@daily")
    before = jobs_rows(settings)
    base = ["jobs", "add", "load", "--handler", HANDLER]
    cases = [
        ([*base, "--schedule", "@hourly", "--after", "nope"], "after"),
        ([*base, "--schedule", "@hourly", "--after", "extract"], "after_match"),
        (
            [*base, "--schedule", "@daily", "--after", "extract", "--after-match", "x"],
            "after_match",
        ),
        (
            [*base, "--schedule", "@daily", "--after", "extract", "--after-failure", "x"],
            "after_failure",
        ),
        (
            [*base, "--schedule", "@daily", "--after", "extract", "--after-timeout", "0s"],
            "after_timeout",
        ),
    ]
    for args, field in cases:
        assert_bad_input(initialised(*args), field)
    assert jobs_rows(settings) == before


def test_a_job_waiting_on_its_chain_lists_no_next_run(initialised: Invoke) -> None:
    """`jobs list` and its JSON showed the internal 9998-01-01 / 9999-01-01 markers of a job
    that waits on an upstream; the docs say null."""
    add(initialised, "extract")
    add(initialised, "load", "--schedule", "@after:extract")
    listed_json = json.loads(initialised("jobs", "list", "--json").stdout)
    (load,) = [j for j in listed_json if j["name"] == "load"]
    assert (load["next_run_at"], load["health"]["next_slot"]) == (None, None)
    shown = json.loads(initialised("jobs", "show", "load", "--json").stdout)
    assert shown["next_run_at"] is None and shown["slot_at"] is None
    listed = initialised("jobs", "list").stdout
    assert "9998-01-01" not in listed and "9999-01-01" not in listed, listed
    (row,) = [line.split() for line in listed.splitlines() if line.split()[1:2] == ["load"]]
    assert row[4:6] == ["idle", "-"]


def test_no_job_waits_for_an_each_zone_job(
    settings: ClusterSettings, initialised: Invoke, tmp_path: Path
) -> None:
    """An each-zone job runs its slots through a child per zone and has none of its own: a
    job waiting for it was held to its ``--after-timeout`` and skipped every slot, saying
    the upstream's slot had not run. Naming one as an upstream, and making an upstream an
    each-zone job while a job waits for it, are refused, nothing written."""
    add(initialised, "ping", "--each-zone")
    add(initialised, "extract")
    add(initialised, "load", "--after", "extract")
    before = jobs_rows(settings)
    waiting = ["jobs", "add", "report", "--handler", HANDLER, "--schedule", "@hourly"]
    assert_bad_input(initialised(*waiting, "--after", "ping"), "after")
    path = tmp_path / "jobs.json"
    each = {"name": "extract", "schedule": "@hourly", "handler": HANDLER, "each_zone": True}
    path.write_text(json.dumps([each]), "utf-8")
    assert_bad_input(initialised("jobs", "apply", str(path)), "each_zone")
    assert jobs_rows(settings) == before
    # The same file may stop waiting for it as it becomes one.
    load = {"name": "load", "schedule": "@hourly", "handler": HANDLER}
    path.write_text(json.dumps([each, load]), "utf-8")
    applied = initialised("jobs", "apply", str(path))
    assert applied.exit_code == 0, applied.output
