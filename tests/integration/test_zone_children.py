"""The children of an each-zone job against a real Postgres: each copies what the job's
options declare a child copies (``child``, cluster/jobs/spec.py), its jitter and labels too,
and follows its parent's changes in their transaction; each child's slots start at its own
jittered offset."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg
import pytest

from cluster.settings import ClusterSettings
from cluster.store.lock.session import LockSession
from cluster.timing.jitter import jittered
from node.membership.eachzone import ZoneChildren
from node.state import NodeState
from tests.helpers.cli import Invoke

SWEEP = {"name": "sweep", "schedule": "@hourly", "handler": "m:f", "each_zone": True}


async def _align(settings: ClusterSettings, zone: str) -> bool:
    """What a node of ``zone`` does for the each-zone jobs: their children there in line."""
    node = f"node-{zone}"
    session = LockSession(settings, node, zone, session_timeout_s=10, statement_timeout_s=5)
    await session.open()
    try:
        return await ZoneChildren(NodeState(node, zone, 16), session).run_once()
    finally:
        await session.close()


def _children(settings: ClusterSettings) -> list[tuple[str, float, Any, datetime, datetime]]:
    with psycopg.connect(settings.database_url, options=f"-c search_path={settings.schema}") as c:
        return c.execute(
            "SELECT name, jitter_s, labels, slot_at, next_run_at FROM jobs"
            " WHERE parent_id IS NOT NULL ORDER BY name"
        ).fetchall()


def test_an_each_zone_jobs_children_keep_its_jitter_and_labels(
    initialised: Invoke, settings: ClusterSettings, tmp_path: Path
) -> None:
    added = initialised(
        "jobs", "add", "sweep", "--schedule", "@hourly", "--handler", "m:f", "--each-zone",
        "--zones", "a,b", "--jitter", "10m", "--label", "team=ops",
    )  # fmt: skip
    assert added.exit_code == 0, added.output
    assert asyncio.run(_align(settings, "a")) and asyncio.run(_align(settings, "b"))
    children = _children(settings)
    assert [c[0] for c in children] == ["sweep@a", "sweep@b"]
    for name, jitter_s, labels, slot, start in children:
        assert (jitter_s, labels) == (600.0, {"team": "ops"}), name
        assert start == jittered("default", name, slot, 600.0), name
        assert slot <= start < slot + timedelta(minutes=10), name
    assert children[0][4] != children[1][4], "each child's offset is its own"

    # The parent changed: its children follow in the apply's transaction, and the nodes'
    # keepers find them in line.
    path = tmp_path / "jobs.json"
    entry = {**SWEEP, "zones": ["a", "b"], "jitter": "5m", "labels": {"team": "infra"}}
    path.write_text(json.dumps([entry]), "utf-8")
    assert initialised("jobs", "apply", str(path)).exit_code == 0
    for name, jitter_s, labels, slot, start in _children(settings):
        assert (jitter_s, labels) == (300.0, {"team": "infra"}), name
        assert start == jittered("default", name, slot, 300.0), name
    assert not asyncio.run(_align(settings, "a")), "in line: nothing to write"
    assert not asyncio.run(_align(settings, "b")), "in line: nothing to write"


@pytest.mark.parametrize("removal", ["remove", "prune"])
def test_a_zone_left_out_or_the_job_removed_takes_the_children_in_the_same_transaction(
    initialised: Invoke, settings: ClusterSettings, tmp_path: Path, removal: str
) -> None:
    """An apply that leaves a zone out of an each-zone job's ``zones``, and a removal of the
    job, remove the children it no longer has, with their history, before the nodes'
    keepers pass: a child left to them ran its zone's slots for up to a pass."""
    path = tmp_path / "jobs.json"
    path.write_text(json.dumps([{**SWEEP, "zones": ["a", "b", "c"]}]), "utf-8")
    assert initialised("jobs", "apply", str(path)).exit_code == 0
    for zone in "abc":
        assert asyncio.run(_align(settings, zone))
    assert [c[0] for c in _children(settings)] == ["sweep@a", "sweep@b", "sweep@c"]
    path.write_text(json.dumps([{**SWEEP, "zones": ["a", "b"]}]), "utf-8")
    assert initialised("jobs", "apply", str(path)).exit_code == 0
    assert [c[0] for c in _children(settings)] == ["sweep@a", "sweep@b"]
    if removal == "remove":
        removed = initialised("jobs", "remove", "sweep")
    else:  # an apply --prune of a file without it
        path.write_text(json.dumps([{"name": "other", "schedule": "@daily", "handler": "m:f"}]))
        removed = initialised("jobs", "apply", str(path), "--prune")
    assert removed.exit_code == 0, removed.output
    assert _children(settings) == []


@pytest.mark.parametrize(
    "command",
    [
        ("jobs", "pause", "sweep@a"),
        ("jobs", "pause", "sweep@a", "--until", "2099-01-01T00:00:00Z"),
        ("jobs", "resume", "sweep@a"),
        ("jobs", "apply", "FILE"),
    ],
    ids=["pause", "pause-until", "resume", "apply"],
)
def test_a_child_is_paused_and_written_through_its_parent_only(
    initialised: Invoke, settings: ClusterSettings, tmp_path: Path, command: tuple[str, ...]
) -> None:
    """A pause of an each-zone job's child was undone by the parent's next apply, and
    ``pulse audit``, which judges a child by its parent's revisions, called the slots it held
    missing; an apply of a job named as a child rewrote the child. Each is refused, one
    line naming the parent, and nothing is written."""
    path = tmp_path / "jobs.json"
    path.write_text(json.dumps([{**SWEEP, "zones": ["a", "b"]}]), "utf-8")
    assert initialised("jobs", "apply", str(path)).exit_code == 0
    assert asyncio.run(_align(settings, "a"))
    before = _children(settings)
    child = {"name": "sweep@a", "schedule": "@daily", "handler": "m:f"}
    path.write_text(json.dumps([child]), "utf-8")
    result = initialised(*[str(path) if part == "FILE" else part for part in command])
    assert result.exit_code == 2, result.output
    (line,) = result.output.strip().splitlines()
    assert "child of" in line and "each-zone job" in line, line
    assert _children(settings) == before
    with psycopg.connect(settings.database_url, options=f"-c search_path={settings.schema}") as c:
        assert c.execute("SELECT paused, schedule FROM jobs WHERE name = 'sweep@a'").fetchone() == (
            False,
            "@hourly",
        )


def test_a_keeper_waits_for_the_apply_that_makes_the_job_an_ordinary_one(
    initialised: Invoke, settings: ClusterSettings
) -> None:
    """A zone's keeper making its child while an apply makes the job an ordinary one, not
    yet committed: it read the job as it stood and made the child after the apply had
    removed the others, and that child ran the job's slots until the keeper's next pass. It
    waits for the apply now, and makes none."""
    assert initialised("jobs", "add", "sweep", "--schedule", "@hourly", "--handler", "m:f",
                       "--each-zone").exit_code == 0  # fmt: skip
    url, options = settings.database_url, f"-c search_path={settings.schema}"
    with (
        psycopg.connect(url, options=options) as apply,
        psycopg.connect(url, autocommit=True) as watch,
    ):
        apply.execute("UPDATE jobs SET each_zone = false WHERE name = 'sweep'")  # not committed
        keeper = threading.Thread(target=lambda: asyncio.run(_align(settings, "b")))
        keeper.start()
        waiting = (
            "SELECT count(*) FROM pg_stat_activity"
            " WHERE wait_event_type = 'Lock' AND datname = current_database()"
        )
        deadline = time.monotonic() + 30
        while keeper.is_alive() and watch.execute(waiting).fetchone() == (0,):
            assert time.monotonic() < deadline, "the keeper neither waited nor ended"
            time.sleep(0.01)  # polling the server for the keeper's lock wait
        apply.commit()
        keeper.join(30)
    assert _children(settings) == []
