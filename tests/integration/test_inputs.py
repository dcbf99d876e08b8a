"""Runs with inputs against a real Postgres: ``trigger --payload`` and ``--merge-payload``
queue one flight carrying the payload, claimed with it and recorded with origin
``trigger``; ``--slot`` re-runs a past slot as a one-slot backfill of origin ``rerun``;
``payload_schema`` is checked at add, apply and trigger (after merging); every refusal
writes nothing. Through the CLI too: one line, exit 2."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg
import pytest

from cluster.errors import Conflict, InvalidInput
from cluster.jobs.spec import JobSpec
from cluster.settings import ClusterSettings
from cluster.store.housekeeping import backfills
from cluster.store.jobstore.store import JobStore
from cluster.store.side import SideConnection
from node.handlers.context import Outcome
from node.pipeline.outcomes import after_run
from tests.helpers.cli import Invoke, add_args, assert_bad_input
from tests.helpers.sessions import Opener

T0 = datetime(2031, 3, 4, 12, 0, tzinfo=UTC)
ALL = range(16)
OK = Outcome("succeeded", None, 0.01)
SCHEMA = {
    "type": "object",
    "properties": {"region": {"enum": ["eu", "us"]}, "days": {"type": "integer"}},
    "required": ["region"],
}


async def add(store: JobStore, **options: Any) -> None:
    spec = JobSpec.build(
        "roll",
        "@every 1m",
        "shell:true",
        tenant="acme",
        payload={"region": "eu", "days": 1},
        payload_schema=SCHEMA,
        **options,
    )
    await store.definitions.add(spec, now=T0)


def table(settings: ClusterSettings, name: str) -> list[tuple[Any, ...]]:
    with psycopg.connect(settings.database_url, autocommit=True) as conn:
        return conn.execute(f"SELECT * FROM {settings.schema}.{name}").fetchall()


async def fill(settings: ClusterSettings, now: datetime) -> int:
    async with SideConnection(settings, "n1/backfill", statement_timeout_s=5).using() as side:
        return await backfills.fill(side, ALL, now)


async def test_a_trigger_with_a_payload_runs_one_flight_with_it(
    store: JobStore, open_session: Opener
) -> None:
    await add(store)
    before = await store.get("roll", "acme")
    now = T0 + timedelta(seconds=30)
    queued = await store.inputs.trigger("roll", "acme", payload={"region": "us"}, now=now)
    assert (queued.slot, queued.origin, queued.payload) == (now, "trigger", {"region": "us"})
    after = await store.get("roll", "acme")
    assert (after.slot_at, after.next_run_at) == (before.slot_at, before.next_run_at)
    node = await open_session("n1")
    (flight,) = await node.flights.claim(ALL, 10, 30.0, now=now)
    assert (flight.slot, flight.payload) == (now, {"region": "us"})
    await node.completions.complete_flights([after_run(flight, OK, now)[0]], now=now)
    (run,) = await store.runs("roll", "acme")
    assert (run.scheduled_for, run.origin, run.status) == (now, "trigger", "succeeded")


async def test_merge_payload_merges_then_checks_the_schema(
    store: JobStore, open_session: Opener
) -> None:
    await add(store)
    now = T0 + timedelta(seconds=30)
    queued = await store.inputs.trigger("roll", "acme", merge_payload='{"days": 9}', now=now)
    assert queued.payload == {"region": "eu", "days": 9}
    node = await open_session("n1")
    (flight,) = await node.flights.claim(ALL, 10, 30.0, now=now)
    assert flight.payload == {"region": "eu", "days": 9}
    flights = table(store.settings, "flights")
    with pytest.raises(InvalidInput) as bad:  # removing a required key
        await store.inputs.trigger("roll", "acme", merge_payload={"region": None}, now=now)
    assert bad.value.field == "merge_payload" and "'region' is a required" in str(bad.value)
    with pytest.raises(InvalidInput) as bad:
        await store.inputs.trigger("roll", "acme", payload={"region": "mars"}, now=now)
    assert bad.value.field == "payload"
    with pytest.raises(InvalidInput) as bad:
        await store.inputs.trigger("roll", "acme", payload={}, merge_payload={}, now=now)
    assert bad.value.field == "merge_payload"
    assert table(store.settings, "flights") == flights, "nothing written"


async def test_a_rerun_is_a_one_slot_backfill_of_origin_rerun(
    store: JobStore, open_session: Opener, settings: ClusterSettings
) -> None:
    await add(store)
    slot, now = T0, T0 + timedelta(minutes=10)  # a slot before the job's first (T0 + 1m)
    queued = await store.inputs.trigger(
        "roll", "acme", slot=slot, payload={"region": "us"}, now=now
    )
    assert (queued.slot, queued.origin, queued.backfill_id) == (slot, "rerun", 1)
    (request,) = await store.runcontrol.backfills("acme")
    assert (request.origin, request.slots_total, request.range_from) == ("rerun", 1, slot)
    assert await fill(settings, now) == 1
    node = await open_session("n1")
    (flight,) = await node.flights.claim(ALL, 10, 30.0, now=now)
    assert (flight.slot, flight.payload) == (slot, {"region": "us"})
    await node.completions.complete_flights([after_run(flight, OK, now)[0]], now=now)
    (run,) = await store.runs("roll", "acme")
    assert (run.scheduled_for, run.origin, run.status) == (slot, "rerun", "succeeded")
    await fill(settings, now)
    (request,) = await store.runcontrol.backfills("acme")
    assert request.status == "done"


async def test_bad_reruns_are_refused_with_nothing_written(
    store: JobStore, open_session: Opener
) -> None:
    await add(store, retries=2)
    now = T0 + timedelta(minutes=10)
    refused = [
        (T0 + timedelta(minutes=11), "slot", "in the future"),
        (T0 + timedelta(minutes=3, seconds=1), "slot", "not a slot of the job's schedule"),
    ]
    for slot, field, words in refused:
        with pytest.raises(InvalidInput) as bad:
            await store.inputs.trigger("roll", "acme", slot=slot, now=now)
        assert bad.value.field == field and words in str(bad.value)
    node = await open_session("n1")
    (job,) = (await node.claim(ALL, 10, 30.0, now=now)).jobs  # its due slot is running
    with pytest.raises(Conflict, match="is running now"):
        await store.inputs.trigger("roll", "acme", slot=job.slot, now=now)
    # Behind its running slot: the job decides it when the run ends (catch-up).
    with pytest.raises(Conflict, match="has not been run or passed by the job yet"):
        await store.inputs.trigger("roll", "acme", slot=job.slot + timedelta(minutes=2), now=now)
    await store.inputs.trigger("roll", "acme", slot=T0, now=now)
    with pytest.raises(Conflict, match="queued already"):
        await store.inputs.trigger("roll", "acme", slot=T0, now=now + timedelta(seconds=1))
    assert len(await store.runcontrol.backfills("acme")) == 1
    await store.pause("roll", "acme")
    with pytest.raises(InvalidInput, match="is paused"):
        await store.inputs.trigger("roll", "acme", slot=T0 + timedelta(minutes=1), now=now)


async def test_a_flight_with_input_and_the_regular_slot_never_run_at_once(
    store: JobStore, open_session: Opener
) -> None:
    """Overlap forbid (S3): a triggered flight waits for the running regular slot, and the
    regular slot for a running triggered flight."""
    await add(store)
    node = await open_session("n1")
    due = T0 + timedelta(minutes=1)
    (regular,) = (await node.claim(ALL, 10, 30.0, now=due)).jobs
    await store.inputs.trigger("roll", "acme", payload={"region": "us"}, now=due)
    assert await node.flights.claim(ALL, 10, 30.0, now=due) == [], "waits for the regular slot"
    await node.completions.complete([after_run(regular, OK, due)[0]], now=due)
    (flight,) = await node.flights.claim(ALL, 10, 30.0, now=due)
    later = due + timedelta(minutes=1)
    assert (await node.claim(ALL, 10, 30.0, now=later)).jobs == [], "waits for the flight"
    await node.completions.complete_flights([after_run(flight, OK, later)[0]], now=later)
    assert len((await node.claim(ALL, 10, 30.0, now=later)).jobs) == 1


async def test_the_schema_is_checked_at_add_and_apply(store: JobStore, tmp_path: Path) -> None:
    await add(store)
    with pytest.raises(InvalidInput) as bad:
        JobSpec.build("x", "@daily", "shell:true", payload_schema=SCHEMA)
    assert bad.value.field == "payload"
    entry = {"name": "roll", "tenant": "acme", "schedule": "@every 1m", "handler": "shell:true"}
    changed = {**entry, "payload": {"region": "us"}, "payload_schema": SCHEMA}
    result = await store.definitions.apply([JobSpec.from_mapping(changed)])
    assert [r for r in result.updated] and (await store.get("roll", "acme")).payload == {
        "region": "us"
    }
    assert (await store.get("roll", "acme")).payload_schema == SCHEMA


# -- the CLI ---------------------------------------------------------------------------------


def test_cli_trigger_with_input_and_its_refusals(
    initialised: Invoke, settings: ClusterSettings, tmp_path: Path
) -> None:
    pulse = initialised
    schema = json.dumps(SCHEMA)
    made = pulse(*add_args("roll", "--payload", '{"region": "eu"}', "--payload-schema", schema))
    assert made.exit_code == 0, made.output
    shown = json.loads(pulse("jobs", "show", "roll", "--json").stdout)
    assert shown["payload_schema"] == SCHEMA
    done = pulse("jobs", "trigger", "roll", "--merge-payload", '{"days": 2}', "--json")
    assert done.exit_code == 0, done.output
    queued = json.loads(done.stdout)
    assert (queued["origin"], queued["payload"]) == ("trigger", {"region": "eu", "days": 2})
    text = pulse("jobs", "trigger", "roll", "--payload", '{"region": "us"}')
    assert text.exit_code == 0 and text.stdout.startswith("queued triggered slot "), text.output
    flights = table(settings, "flights")
    backfill_rows = table(settings, "backfills")
    assert len(flights) == 2
    bad = [
        (["--payload", '{"region": "mars"}'], "payload"),
        (["--merge-payload", '{"region": null}'], "merge_payload"),
        (["--payload", "{}", "--merge-payload", "{}"], "merge_payload"),
        (["--payload", "[1]"], "payload"),
        (["--slot", "yesterday"], "slot"),
        (["--slot", "2031-01-01T00:00:00"], "slot"),
        (["--slot", "2999-01-01T00:00:00+00:00"], "slot"),
    ]
    for extra, field in bad:
        assert_bad_input(pulse("jobs", "trigger", "roll", *extra), field)
    assert_bad_input(pulse(*add_args("other", "--payload-schema", '{"type": 5}')), "payload_schema")
    assert_bad_input(
        pulse(*add_args("other", "--payload-schema", schema, "--payload", "{}")), "payload"
    )
    file = tmp_path / "jobs.yaml"
    file.write_text(
        json.dumps([{"name": "filed", "schedule": "@daily", "handler": "shell:true",
                     "payload_schema": SCHEMA}])
    )  # fmt: skip
    applied = pulse("jobs", "apply", str(file))
    assert applied.exit_code == 2 and "payload" in applied.stderr
    assert table(settings, "flights") == flights and table(settings, "backfills") == backfill_rows
    assert [r for r in json.loads(pulse("jobs", "list", "--json").stdout)] == [
        r for r in json.loads(pulse("jobs", "list", "--json").stdout) if r["name"] == "roll"
    ]


async def test_at_most_ten_triggered_runs_wait_per_job(store: JobStore) -> None:
    await add(store)
    for i in range(10):
        now = T0 + timedelta(seconds=i)
        await store.inputs.trigger("roll", "acme", payload={"region": "us"}, now=now)
    with pytest.raises(Conflict, match="10 triggered runs waiting"):
        await store.inputs.trigger("roll", "acme", payload={"region": "us"}, now=T0 + timedelta(1))
    assert len(table(store.settings, "flights")) == 10


async def test_an_each_zone_parent_is_not_triggered_with_input(store: JobStore) -> None:
    await store.definitions.add(
        JobSpec.build("everywhere", "@daily", "shell:true", each_zone=True), now=T0
    )
    with pytest.raises(InvalidInput, match="one child job per zone") as bad:
        await store.inputs.trigger("everywhere", payload={}, now=T0)
    assert bad.value.field == "name" and table(store.settings, "flights") == []
