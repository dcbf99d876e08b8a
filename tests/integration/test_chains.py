"""Chained jobs (``@after:A``) against a real Postgres: each success of the upstream makes
one slot of the downstream (its nominal slot is the upstream's), written by the upstream's
fenced completion; a failure makes none; successes queue while the downstream runs; a
fan-in waits for every upstream's slot and runs it once; a locked row is caught by the gate
pass; cycles, unknown upstreams and options that cannot go with a chain are refused whole
(docs/design/chains.md)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from cluster.errors import InvalidInput
from cluster.jobs.spec import JobSpec
from cluster.settings import ClusterSettings
from cluster.store.connect import connect
from cluster.store.jobstore.store import JobStore
from cluster.store.lock.records import NEVER, ClaimedJob
from node.handlers.context import Outcome
from node.pipeline.outcomes import after_run
from tests.helpers.history import rows
from tests.helpers.sessions import ALL, T0, Opener, at

HANDLER = "cluster.chaos.witness:record"
OK = Outcome("succeeded", None, 0.1)
FAILED = Outcome("failed", "boom", 0.1)


def job(name: str, schedule: str = "@every 10s", **kw: Any) -> JobSpec:
    return JobSpec.build(name, schedule, HANDLER, **kw)


async def claim(open_session: Opener, now: datetime) -> dict[str, ClaimedJob]:
    node = await open_session("node-a", "zone-a")
    return {j.name: j for j in (await node.claim(ALL, 50, 0.0, now=now)).jobs}


async def finish(
    open_session: Opener, claimed: ClaimedJob, outcome: Outcome, now: datetime
) -> None:
    node = await open_session("node-a", "zone-a")
    done, skips = after_run(claimed, outcome, now)
    assert await node.completions.complete([done], skips, now=now) == {claimed.id}


async def job_rows(settings: ClusterSettings) -> dict[str, dict[str, Any]]:
    return {r["name"]: r for r in await rows(settings, "SELECT * FROM jobs ORDER BY name")}


async def runs_of(settings: ClusterSettings, name: str) -> list[tuple[datetime, str]]:
    found = await rows(
        settings,
        "SELECT scheduled_for, status FROM runs WHERE job_name = %s ORDER BY scheduled_for",
        (name,),
    )
    return [(r["scheduled_for"], r["status"]) for r in found]


async def test_a_three_job_chain_runs_each_slot_after_its_upstream(
    store: JobStore, settings: ClusterSettings, open_session: Opener
) -> None:
    await store.definitions.apply([job("a"), job("b", "@after:a"), job("c", "@after:b")], now=T0)
    b = (await job_rows(settings))["b"]
    assert (b["gated"], b["status"], b["next_run_at"]) == (True, "idle", NEVER)
    first = await claim(open_session, at(10))
    assert set(first) == {"a"}, "b and c have no clock"
    await finish(open_session, first["a"], OK, at(11))
    second = await claim(open_session, at(11))
    assert set(second) == {"b"} and second["b"].slot == at(10), "a's slot is b's slot"
    await finish(open_session, second["b"], OK, at(12))
    third = await claim(open_session, at(12))
    assert set(third) == {"c"} and third["c"].slot == at(10)
    await finish(open_session, third["c"], OK, at(13))
    rows_ = await job_rows(settings)
    assert (rows_["b"]["next_run_at"], rows_["b"]["prev_slot"]) == (NEVER, at(10))
    assert await runs_of(settings, "c") == [(at(10), "succeeded")]
    shown = await store.details("b")
    assert shown["next_slots"] == [] and shown["upstreams"] == ["a"]
    assert shown["waits_for"] == "the next success of a"
    assert shown["downstreams"] == ["c"]


async def test_a_failure_makes_no_slot_and_successes_queue(
    store: JobStore, settings: ClusterSettings, open_session: Opener
) -> None:
    await store.definitions.apply([job("a", retries=0), job("b", "@after:a")], now=T0)
    failed = await claim(open_session, at(10))
    await finish(open_session, failed["a"], FAILED, at(11))
    assert set(await claim(open_session, at(19))) == set(), "a failed: b has no slot"
    # a's 20 succeeds, b starts it; a's 30 succeeds while b runs: queued, not lost.
    a20 = (await claim(open_session, at(20)))["a"]
    await finish(open_session, a20, OK, at(21))
    b20 = (await claim(open_session, at(21)))["b"]
    a30 = (await claim(open_session, at(30)))["a"]
    await finish(open_session, a30, OK, at(31))
    assert set(await claim(open_session, at(31))) == set(), "b still runs its 20"
    await finish(open_session, b20, OK, at(32))
    b30 = (await claim(open_session, at(32)))["b"]
    assert b30.slot == at(30)
    await finish(open_session, b30, OK, at(33))
    assert await runs_of(settings, "b") == [(at(20), "succeeded"), (at(30), "succeeded")]
    assert (await job_rows(settings))["b"]["next_run_at"] == NEVER


async def test_fan_in_waits_for_every_upstream_and_runs_once(
    store: JobStore, settings: ClusterSettings, open_session: Opener
) -> None:
    await store.definitions.apply([job("a"), job("e"), job("d", "@after:a,e")], now=T0)
    both = await claim(open_session, at(10))
    await finish(open_session, both["a"], OK, at(11))
    d = (await job_rows(settings))["d"]
    assert (d["slot_at"], d["gate_wait"]) == (at(10), True), "waits for e's slot 10"
    assert set(await claim(open_session, at(11))) == set()
    await finish(open_session, both["e"], OK, at(12))
    d10 = (await claim(open_session, at(12)))["d"]
    assert d10.slot == at(10)
    await finish(open_session, d10, OK, at(13))
    assert set(await claim(open_session, at(14))) == set(), "e's success made no second slot"
    assert await runs_of(settings, "d") == [(at(10), "succeeded")]


async def test_a_stale_completion_releases_nothing(
    store: JobStore, settings: ClusterSettings, open_session: Opener
) -> None:
    await store.definitions.apply([job("a"), job("b", "@after:a")], now=T0)
    a = (await claim(open_session, at(10)))["a"]
    node = await open_session("node-a", "zone-a")
    done, _ = after_run(a, OK, at(11))
    stale = done._replace(token=a.lease_token - 1)
    assert await node.completions.complete([stale], now=at(11)) == set()
    assert await rows(settings, "SELECT * FROM chain_slots") == []
    await node.completions.complete([done], now=at(11))
    assert [r["slot"] for r in await rows(settings, "SELECT * FROM chain_slots")] == [at(10)]


async def test_the_gate_pass_starts_what_a_locked_row_missed(
    store: JobStore, settings: ClusterSettings, open_session: Opener
) -> None:
    await store.definitions.apply([job("a"), job("b", "@after:a")], now=T0)
    a = (await claim(open_session, at(10)))["a"]
    blocker = await connect(settings, "blocker")
    try:
        await blocker.execute(b"BEGIN")
        await blocker.execute(b"SELECT 1 FROM jobs WHERE name = 'b' FOR UPDATE")
        await finish(open_session, a, OK, at(11))  # does not wait for the locked row
        await blocker.execute(b"ROLLBACK")
    finally:
        await blocker.close()
    assert (await job_rows(settings))["b"]["next_run_at"] == NEVER
    (pulled,) = await rows(settings, "SELECT chain_pull(%s::int[], %s) AS n", (ALL, at(11.5)))
    assert pulled["n"] == 1
    assert (await claim(open_session, at(12)))["b"].slot == at(10)


async def test_pause_and_resume_keep_the_released_slots(
    store: JobStore, settings: ClusterSettings, open_session: Opener
) -> None:
    await store.definitions.apply([job("a"), job("b", "@after:a")], now=T0)
    await store.pause("b")
    a = (await claim(open_session, at(10)))["a"]
    await finish(open_session, a, OK, at(11))
    assert set(await claim(open_session, at(12))) == set()
    await store.resume("b", now=at(12))
    # Resumed, it takes the slot released meanwhile, due from the resume (database time).
    soon = datetime.now(UTC) + timedelta(seconds=5)
    assert (await claim(open_session, soon))["b"].slot == at(10)


async def test_a_done_chained_job_is_released_nothing_and_more_runs_wait_for_the_next_success(
    store: JobStore, settings: ClusterSettings, open_session: Opener
) -> None:
    """b is done after one run. Before, the slot released while that run went on stayed
    queued, every later success of a released one more (rows the pruning never takes), and
    b given more runs ran them all, the oldest first. The queued slot is taken when b is
    done, a done b is released nothing, and one given more runs waits for the next."""
    await store.definitions.apply([job("a"), job("b", "@after:a", max_runs=1)], now=T0)
    await finish(open_session, (await claim(open_session, at(10)))["a"], OK, at(11))
    b10 = (await claim(open_session, at(11)))["b"]
    await finish(open_session, (await claim(open_session, at(20)))["a"], OK, at(21))
    await finish(open_session, b10, OK, at(22))
    assert (await job_rows(settings))["b"]["status"] == "done"
    await finish(open_session, (await claim(open_session, at(30)))["a"], OK, at(31))
    queued = "SELECT slot, taken FROM chain_slots ORDER BY slot"
    assert [(r["slot"], r["taken"]) for r in await rows(settings, queued)] == [
        (at(10), True), (at(20), True),
    ]  # fmt: skip
    more = [job("a"), job("b", "@after:a", max_runs=2)]
    assert (await store.definitions.apply(more, now=at(32))).updated == ["b"]
    assert set(await claim(open_session, at(33))) == set(), "nothing left from before"
    await finish(open_session, (await claim(open_session, at(40)))["a"], OK, at(41))
    b40 = (await claim(open_session, at(41)))["b"]
    assert b40.slot == at(40)
    await finish(open_session, b40, OK, at(42))
    assert (await job_rows(settings))["b"]["status"] == "done"
    assert await runs_of(settings, "b") == [(at(10), "succeeded"), (at(40), "succeeded")]


async def test_removing_a_chained_job_drops_its_slots(
    store: JobStore, settings: ClusterSettings, open_session: Opener
) -> None:
    await store.definitions.apply([job("a"), job("b", "@after:a")], now=T0)
    await store.pause("b")
    await finish(open_session, (await claim(open_session, at(10)))["a"], OK, at(11))
    await store.remove("b")
    assert await rows(settings, "SELECT * FROM chain_slots") == []


@pytest.mark.parametrize(
    ("specs", "message"),
    [
        ([job("b", "@after:nope")], "unknown upstream 'nope' in tenant 'default'"),
        ([job("a"), job("b", "@after:c"), job("c", "@after:b")], "cycle: "),
        ([job("b", "@after:b")], "cannot wait for itself"),
        ([job("a", overlap="allow"), job("b", "@after:a")], "cannot chain"),
    ],
)
async def test_bad_chains_are_refused_and_nothing_is_written(
    store: JobStore, specs: list[JobSpec], message: str
) -> None:
    with pytest.raises(InvalidInput, match=message):
        await store.definitions.apply(specs, now=T0)
    assert await store.jobs() == []


async def test_an_upstream_of_another_tenant_is_unknown(store: JobStore) -> None:
    await store.definitions.apply([job("a", tenant="other")], now=T0)
    with pytest.raises(InvalidInput, match="unknown upstream 'a'"):
        await store.definitions.apply([job("b", "@after:a")], now=T0)
    assert [j.name for j in await store.jobs()] == ["a"]


@pytest.mark.parametrize(
    ("options", "field"),
    [
        ({"after": "x"}, "after"),
        ({"after_match": "latest"}, "after_match"),
        ({"overlap": "allow"}, "overlap"),
        ({"jitter": "1s"}, "jitter"),
        ({"calendar": "c"}, "calendar"),
        ({"schedule": "@after:"}, "schedule"),
    ],
)
def test_options_that_cannot_go_with_a_chain(options: dict[str, Any], field: str) -> None:
    schedule = options.pop("schedule", "@after:a")
    with pytest.raises(InvalidInput) as caught:
        job("b", schedule, **options)
    assert caught.value.field == field
    with pytest.raises(InvalidInput, match="after_match"):
        job("b", after="a", after_match="chain")
