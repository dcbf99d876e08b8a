"""`pulse node --log-format json`: every line is JSON; lines about a job name it fully."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import pytest

from cluster.jobs.spec import JobSpec
from cluster.settings import ClusterSettings
from tests.helpers.nodes import Nodes, init_cluster
from tests.helpers.waiting import until

SECRET = "s3cret-pw"
JOB_FIELDS = {"job", "tenant", "slot", "attempt", "node_id"}


@pytest.fixture
def nodes(settings: ClusterSettings, tmp_path: Path) -> Iterator[Nodes]:
    init_cluster(
        settings,
        JobSpec.build("limits", "@every 1s", "examples.handlers:rate_limit_sync", tenant="acme"),
        shards=16,
    )
    started = Nodes(settings, tmp_path)
    try:
        yield started
    finally:
        started.stop_all()


def _with_password(url: str) -> str:
    # Local Postgres trusts loopback connections, so any password works and none may leak.
    parts = urlsplit(url)
    netloc = f"{parts.username or 'postgres'}:{SECRET}@{parts.hostname}:{parts.port or 5432}"
    return urlunsplit(parts._replace(netloc=netloc))


def records(lines: list[str]) -> list[dict[str, Any]]:
    return [json.loads(line) for line in lines if line.strip()]


@pytest.mark.timeout(90)
@pytest.mark.parametrize("where", ["before", "after"])
def test_json_logs(settings: ClusterSettings, nodes: Nodes, where: str) -> None:
    """The shared options work before the sub-command and after it, as users type them."""
    shared = (
        "--log-level",
        "DEBUG",  # successful runs are logged at DEBUG
        "--log-format",
        "json",
        "--database-url",
        _with_password(settings.database_url),
    )
    if where == "before":
        node = nodes.start("j-1", "z", global_args=shared)
    else:
        node = nodes.start("j-1", "z", *shared)

    def finished() -> list[dict[str, Any]]:
        found = records(node.lines())
        handler = [r for r in found if r["logger"] == "examples.gateway"]
        done = [r for r in found if r.get("event") == "run_finished"]
        return found if handler and done else []

    found = until(finished, "a finished run in the JSON log", 30)
    assert all({"ts", "level", "logger", "msg"} <= set(r) for r in found)
    assert all(r["node_id"] == "j-1" and r["zone"] == "z" for r in found)

    about_jobs = [r for r in found if "job" in r]
    assert about_jobs
    for record in about_jobs:
        assert set(record) >= JOB_FIELDS, record
        assert record["job"] == "limits" and record["tenant"] == "acme"
        assert isinstance(record["attempt"], int)

    startup = [r for r in found if r.get("event") == "node_starting"]
    assert len(startup) == 1
    assert f"{urlsplit(settings.database_url).username or 'postgres'}:***@" in startup[0]["msg"]
    assert all(SECRET not in line for line in node.lines())
