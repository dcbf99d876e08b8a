"""Plans and revisions cover dependencies, against a real Postgres: a change of a job's
upstreams (``after``, ``after_match``) is in ``apply --plan`` (text and JSON: the edges that
appear or go, what the job's slot then waits for) and writes a revision like any field, so
``--plan-file`` refuses a plan an edge change made stale and a rollback restores the
upstreams a revision recorded (docs/design/revisions.md)."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from cluster.errors import Conflict
from cluster.jobs.spec import JobSpec
from cluster.store.jobstore.plans import JobPlan, Plan
from cluster.store.jobstore.store import JobStore
from tests.helpers.cli import Invoke

T0 = datetime(2026, 1, 1, tzinfo=UTC)
HANDLER = "cluster.chaos.witness:record"
SLOT = "2026-01-01T00:00:10Z"


def job(name: str, **kw: Any) -> JobSpec:
    return JobSpec.build(name, "@every 10s", HANDLER, **kw)


def planned(plan: Plan, name: str) -> JobPlan:
    (found,) = [j for j in plan.jobs if j.name == name]
    return found


async def test_dropping_after_with_another_field_is_in_the_plan_and_the_revision(
    store: JobStore,
) -> None:
    await store.definitions.apply([job("a"), job("b", after="a")], now=T0)
    specs = [job("a"), job("b", timeout="1m")]
    b = planned(await store.plans.plan(specs, now=T0), "b")
    changes = {"timeout_s": [300.0, 60.0], "after": [["a"], []], "after_match": ["same", None]}
    assert (b.action, b.changes) == ("update", changes)
    assert (b.edges_added, b.edges_removed, b.waits_for) == ([], ["a -> b (same)"], None)
    assert "waits for no other job any more" in b.notes
    assert b.to_json()["edges"] == {"added": [], "removed": ["a -> b (same)"]}
    await store.definitions.apply(specs, now=T0)
    newest, _ = await store.revisions.history("b", "default")
    assert (newest.revision, newest.diff) == (2, changes)


async def test_changing_after_alone_is_a_revision_and_says_what_the_slot_waits_for(
    store: JobStore,
) -> None:
    await store.definitions.apply([job("a"), job("c"), job("b", after="a")], now=T0)
    specs = [job("a"), job("c"), job("b", after="c")]
    b = planned(await store.plans.plan(specs, now=T0), "b")
    assert (b.action, b.changes) == ("update", {"after": [["a"], ["c"]]})
    assert (b.edges_added, b.edges_removed) == (["c -> b (same)"], ["a -> b (same)"])
    assert b.waits_for == f"upstream c's slot {SLOT} has not run yet"
    assert b.notes == [
        f"waits for c (same): its slot 2026-01-01T00:00:10+00:00 then waits: {b.waits_for}"
    ]
    assert (await store.definitions.apply(specs, now=T0)).updated == ["b"]
    newest, _ = await store.revisions.history("b", "default")
    assert (newest.revision, newest.diff) == (2, {"after": [["a"], ["c"]]})
    assert newest.definition["after"] == ["c"]
    assert (await store.get("b")).revision == 2


async def test_a_created_job_records_its_upstreams_in_its_first_revision(
    store: JobStore,
) -> None:
    await store.definitions.apply([job("a"), job("b", after="a", after_match="latest")], now=T0)
    (created,) = await store.revisions.history("b", "default")
    assert (created.revision, created.change) == (1, "created")
    assert (created.definition["after"], created.definition["after_match"]) == (["a"], "latest")
    assert created.diff["after"] == [None, ["a"]]


async def test_a_plan_file_notices_a_concurrent_change_of_edges(store: JobStore) -> None:
    await store.definitions.apply([job("a"), job("c"), job("b", after="a")], now=T0)
    specs = [job("a"), job("c"), job("b", after="c")]
    plan = await store.plans.plan(specs, now=T0)
    await store.definitions.apply([job("a"), job("c"), job("b", after="a,c")], now=T0)  # meanwhile
    with pytest.raises(Conflict, match="stale: job b is at revision 2, the plan saw 1"):
        await store.definitions.apply(specs, now=T0, expect=plan.expected())
    assert (await store.details("b"))["upstreams"] == ["a", "c"]


async def test_a_rollback_restores_the_upstreams_its_revision_recorded(store: JobStore) -> None:
    await store.definitions.apply([job("a"), job("c"), job("b", after="a")], now=T0)
    await store.definitions.apply([job("a"), job("c"), job("b", after="c")], now=T0)
    done = await store.revisions.rollback("b", "default", 1, now=T0)
    assert (done.restored, done.revision) == (1, 3)
    assert (await store.details("b"))["upstreams"] == ["a"]


def test_the_cli_plan_names_the_edges_that_appear_and_go(
    initialised: Invoke, tmp_path: Path
) -> None:
    pulse = initialised
    jobs = tmp_path / "jobs.json"
    entries: list[dict[str, Any]] = [
        {"name": n, "schedule": "@hourly", "handler": HANDLER} for n in ("a", "c")
    ]
    jobs.write_text(json.dumps([*entries, {**entries[0], "name": "b", "after": ["a"]}]))
    assert pulse("jobs", "apply", str(jobs)).exit_code == 0
    jobs.write_text(json.dumps([*entries, {**entries[0], "name": "b", "after": ["c"]}]))
    result = pulse("jobs", "apply", str(jobs), "--plan")
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert "update b (revision 1)" in lines
    assert '  after: ["a"] -> ["c"]' in lines
    assert "  adds edge c -> b (same)" in lines and "  drops edge a -> b (same)" in lines
    assert any(line.startswith("  note: waits for c (same): its slot ") for line in lines)
    data = json.loads(pulse("jobs", "apply", str(jobs), "--plan", "--json").stdout)
    (b,) = [j for j in data["jobs"] if j["name"] == "b"]
    assert b["edges"] == {"added": ["c -> b (same)"], "removed": ["a -> b (same)"]}
    assert b["waits_for"].startswith("upstream c's slot ")
