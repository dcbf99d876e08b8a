"""Waits for upstreams always end, against a real Postgres with an explicit clock and the
node's own claim, gate and completion statements: a trigger of a job with upstreams is an
extra run that waits for none and leaves its chain and its slots alone; an upstream slot
that was skipped, or that the upstream will never have, skips the downstream's slot with
that reason; a slot waiting for an upstream that does not come is skipped at its bound (its
after-timeout, a day without one) and is visible in `pulse status` if no node takes it;
`waits_for` says what is true; removing an upstream that others wait for is refused unless
they go too (docs/design/gates.md, the ledger rule of docs/guarantees.md)."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

import pytest

from cluster.errors import Conflict, InvalidInput
from cluster.health.status import collect
from cluster.jobs.gates import DEFAULT_AFTER_TIMEOUT_S
from cluster.jobs.spec import JobSpec
from cluster.settings import ClusterSettings
from cluster.store.housekeeping import backfills
from cluster.store.jobstore.store import JobStore
from cluster.store.lock.records import ClaimedJob
from cluster.store.side import SideConnection
from node.handlers.context import Outcome
from node.pipeline.outcomes import after_run, gate_skip, plan_at_claim
from tests.helpers.cli import Invoke, assert_bad_input
from tests.helpers.history import rows
from tests.helpers.sessions import ALL, OK, T0, Opener, at

HANDLER = "cluster.chaos.witness:record"
FAILED = Outcome("failed", "boom", 0.1)
DAY = timedelta(seconds=DEFAULT_AFTER_TIMEOUT_S)


def job(name: str, schedule: str = "@every 10s", **kw: Any) -> JobSpec:
    return JobSpec.build(name, schedule, HANDLER, **kw)


async def claim(open_session: Opener, now: datetime) -> dict[str, ClaimedJob]:
    """What a node's claim loop starts at ``now``: the claim, the gates of its gated first
    attempts (one statement), and the skips they or catch-up decide, written at once."""
    node = await open_session("node-a", "zone-a")
    claimed = (await node.claim(ALL, 50, 30.0, now=now)).jobs
    gated = [(j.id, j.slot) for j in claimed if j.gated and j.attempt == 1]
    verdicts = await node.gate_verdicts(gated) if gated else {}
    runs = {}
    for j in claimed:
        verdict = verdicts.get((j.id, j.slot))
        skip = plan_at_claim(j, now) if verdict is None else gate_skip(j, verdict, now)
        if skip is None:
            runs[j.name] = j
        else:
            assert await node.completions.complete([skip[0]], skip[1], now=now) == {j.id}
    return runs


async def finish(
    open_session: Opener, claimed: ClaimedJob, now: datetime, outcome: Outcome = OK
) -> None:
    node = await open_session("node-a", "zone-a")
    done, skips = after_run(claimed, outcome, now)
    assert await node.completions.complete([done], skips, now=now) == {claimed.id}


async def runs_of(settings: ClusterSettings, name: str) -> list[tuple[datetime, str, Any]]:
    found = await rows(
        settings,
        "SELECT scheduled_for, status, origin, last_error FROM runs WHERE job_name = %s "
        "ORDER BY scheduled_for",
        (name,),
    )
    return [(r["scheduled_for"], r["status"], r["origin"] or r["last_error"]) for r in found]


# -- a trigger is an extra run ---------------------------------------------------------------


async def test_a_trigger_of_a_chained_job_runs_it_at_once_and_the_chain_goes_on(
    store: JobStore, settings: ClusterSettings, open_session: Opener
) -> None:
    await store.definitions.apply([job("a"), job("b", "@after:a"), job("c", "@after:b")], now=T0)
    await store.trigger("b", now=at(5))
    node = await open_session("node-a", "zone-a")
    (extra,) = await node.flights.claim(ALL, 10, 30.0, now=at(5))
    assert (extra.name, extra.slot, extra.origin) == ("b", at(5), "trigger")
    await node.completions.complete_flights([after_run(extra, OK, at(6))[0]], now=at(6))
    # Its success makes c's slot, as every success of b does.
    c5 = (await claim(open_session, at(6)))["c"]
    assert c5.slot == at(5)
    await finish(open_session, c5, at(7))
    # The chain was not wedged: a's slot 10 runs through b and c.
    await finish(open_session, (await claim(open_session, at(10)))["a"], at(11))
    b10 = (await claim(open_session, at(11)))["b"]
    assert b10.slot == at(10)
    await finish(open_session, b10, at(12))
    assert (await claim(open_session, at(12)))["c"].slot == at(10)
    assert await runs_of(settings, "b") == [
        (at(5), "succeeded", "trigger"),
        (at(10), "succeeded", None),
    ]


async def test_a_trigger_of_a_gated_job_costs_none_of_its_slots(
    store: JobStore, settings: ClusterSettings, open_session: Opener
) -> None:
    await store.definitions.apply([job("a"), job("b", after="a")], now=T0)
    before = await store.get("b")
    await store.trigger("b", now=at(5))
    after = await store.get("b")
    assert (after.slot_at, after.next_run_at) == (before.slot_at, before.next_run_at)
    node = await open_session("node-a", "zone-a")
    (extra,) = await node.flights.claim(ALL, 10, 30.0, now=at(5))  # waits for no upstream
    await node.completions.complete_flights([after_run(extra, OK, at(6))[0]], now=at(6))
    await finish(open_session, (await claim(open_session, at(10)))["a"], at(11))
    b10 = (await claim(open_session, at(11)))["b"]
    await finish(open_session, b10, at(12))
    assert await runs_of(settings, "b") == [
        (at(5), "succeeded", "trigger"),
        (at(10), "succeeded", None),
    ]


def test_the_cli_says_a_triggered_run_of_a_gated_job_waits_for_no_upstream(
    initialised: Invoke,
) -> None:
    pulse = initialised
    for name, extra in (("a", []), ("b", ["--after", "a"])):
        added = pulse("jobs", "add", name, "--schedule", "@hourly", "--handler", HANDLER, *extra)
        assert added.exit_code == 0, added.output
    result = pulse("jobs", "trigger", "b")
    assert result.exit_code == 0, result.output
    assert "queued triggered slot" in result.stdout and "waiting for no upstream" in result.stdout


# -- an upstream slot that will not succeed ends the wait ------------------------------------


async def test_an_upstream_slot_skipped_by_catch_up_skips_the_downstream_slot(
    store: JobStore, settings: ClusterSettings, open_session: Opener
) -> None:
    """Jobs added before their nodes start: a's first slots are coalesced by catch-up once,
    so b's first slot is skipped with that reason, and b and its chain run the next one."""
    await store.definitions.apply([job("a"), job("b", after="a"), job("c", "@after:b")], now=T0)
    assert set(await claim(open_session, at(37))) == set()  # a's slot 10 coalesced into 30
    a30 = (await claim(open_session, at(37)))["a"]  # b's slot 10 is skipped meanwhile
    assert a30.slot == at(30)
    b = (await store.details("b"))["waits_for"]
    assert b == "upstream a's slot 2026-01-01T00:00:30Z is running"
    await finish(open_session, a30, at(38))
    b30 = (await claim(open_session, at(38)))["b"]
    assert b30.slot == at(30)
    await finish(open_session, b30, at(39))
    await finish(open_session, (await claim(open_session, at(39)))["c"], at(40))
    reason = (
        "upstream a's slot 2026-01-01T00:00:10Z was skipped: missed by 27s "
        "(catch-up once: coalesced into 2026-01-01T00:00:30+00:00)"
    )
    b_runs = await runs_of(settings, "b")
    assert b_runs[0] == (at(10), "skipped", reason)
    assert [(s, status) for s, status, _ in b_runs] == [
        (at(10), "skipped"),
        (at(20), "skipped"),
        (at(30), "succeeded"),
    ]
    assert [(s, status) for s, status, _ in await runs_of(settings, "c")] == [(at(30), "succeeded")]


async def test_latest_before_the_upstreams_first_slot_is_skipped_not_held(
    store: JobStore, settings: ClusterSettings, open_session: Opener
) -> None:
    await store.definitions.apply(
        [job("a", "@every 1m"), job("b", "@every 15s", after="a", after_match="latest")], now=T0
    )
    assert (await store.get("b")).next_run_at == at(15)  # due, to be recorded skipped
    assert set(await claim(open_session, at(15))) == set()
    (first,) = await runs_of(settings, "b")
    reason = "upstream a has no slot at or before 2026-01-01T00:00:15Z"
    assert first == (at(15), "skipped", reason)
    for t in (30, 45):  # a's first slot is 60: none before it will ever pair
        assert set(await claim(open_session, at(t))) == set()
    shown = await store.details("b")
    assert shown["waits_for"] == "upstream a's slot 2026-01-01T00:01:00Z has not run yet"
    assert shown["waits_until"] == (at(60) + DAY).isoformat()


async def test_a_slot_held_past_its_bound_is_skipped_and_status_shows_it_meanwhile(
    store: JobStore, settings: ClusterSettings, open_session: Opener
) -> None:
    await store.definitions.apply([job("a", paused=True), job("b", after="a")], now=T0)
    b = await store.get("b")
    assert b.next_run_at == at(10) + DAY  # held, with its bound
    seen = await collect(settings, now=at(20))
    assert (seen.held_slots, seen.held_oldest, seen.held_overdue) == (1, at(10), 0)
    late = at(10) + DAY + timedelta(minutes=2)  # no node took it at its bound
    seen = await collect(settings, now=late)
    assert seen.held_overdue == 1 and any("past their bound" in p for p in seen.problems)
    assert set(await claim(open_session, late)) == set()
    first = (await runs_of(settings, "b"))[0]
    assert first == (
        at(10),
        "skipped",
        "upstream a's slot 2026-01-01T00:00:10Z has not run yet (a is paused); "
        "held 1d2m (after-timeout)",
    )


async def test_an_upstream_moved_past_a_slot_without_running_it_skips_it(
    store: JobStore, settings: ClusterSettings, open_session: Opener
) -> None:
    """a paused, then resumed past b's slot: no record of a's slot will ever come. The gate
    pass finds it and b's slot is recorded skipped."""
    await store.definitions.apply([job("a"), job("b", after="a")], now=T0)
    await store.pause("a", now=T0)
    await store.resume("a", now=at(25))  # continues at its slot 30
    statement = "SELECT gate_release(NULL, %s::int[], %s) AS n"
    assert (await rows(settings, statement, (ALL, at(26))))[0]["n"] == 1
    assert set(await claim(open_session, at(26))) == set()
    (first,) = await runs_of(settings, "b")
    reason = "upstream a's slot 2026-01-01T00:00:10Z never ran (a moved past it)"
    assert first == (at(10), "skipped", reason)


async def test_a_held_slot_an_apply_opens_is_due_at_its_slot_not_its_bound(
    store: JobStore, open_session: Opener
) -> None:
    await store.definitions.apply([job("a"), job("b", after="a")], now=T0)
    await store.pause("a", now=T0)
    await store.resume("a", now=at(25))
    # Asked again by an apply that changes its gate settings: open, so due at once.
    await store.definitions.apply([job("a"), job("b", after="a", after_timeout="1h")], now=at(26))
    assert (await store.get("b")).next_run_at == at(10)
    assert set(await claim(open_session, at(26))) == set()  # recorded skipped
    assert (await store.get("b")).slot_at == at(20)  # the newest slot missed (catch-up once)


async def test_a_slot_rule_on_a_chained_upstream_is_refused_in_words(store: JobStore) -> None:
    with pytest.raises(InvalidInput, match=r"b is chained .* chain c to it with @after:b"):
        await store.definitions.apply([job("a"), job("b", "@after:a"), job("c", after="b")], now=T0)
    assert await store.jobs() == []


async def test_a_rerun_whose_upstream_slot_was_skipped_is_recorded_skipped_not_queued(
    store: JobStore, settings: ClusterSettings, open_session: Opener
) -> None:
    await store.definitions.apply([job("a"), job("b", after="a")], now=T0)
    a10 = (await claim(open_session, at(10)))["a"]
    await finish(open_session, a10, at(11), Outcome("skipped", "no new rows", 0.1))
    assert set(await claim(open_session, at(12))) == set()  # b's slot 10 skipped with it
    await store.inputs.trigger("b", slot=at(10), now=at(20))
    async with SideConnection(settings, "n1/backfill", statement_timeout_s=5).using() as side:
        assert await backfills.fill(side, ALL, at(20)) == 1
    node = await open_session("node-a", "zone-a")
    (rerun,) = await node.flights.claim(ALL, 10, 30.0, now=at(20))  # not passed over for ever
    assert (rerun.slot, rerun.gated) == (at(10), True)
    verdicts = await node.gate_verdicts([(rerun.id, rerun.slot)])
    done, _ = gate_skip(rerun, verdicts[(rerun.id, rerun.slot)], at(20))
    assert await node.completions.complete_flights([done], now=at(20)) == {(rerun.id, at(10))}
    reason = "upstream a's slot 2026-01-01T00:00:10Z was skipped: no new rows"
    assert (await runs_of(settings, "b"))[0] == (at(10), "skipped", "rerun")
    (run,) = await rows(settings, "SELECT last_error FROM runs WHERE job_name = 'b'")
    assert run["last_error"] == reason


# -- waits_for says what is true ---------------------------------------------------------------


async def test_waits_for_says_whether_the_upstream_slot_ran_runs_or_failed(
    store: JobStore, open_session: Opener
) -> None:
    specs = [job("a", retries=1, retry_backoff="5s"), job("b", after="a")]
    await store.definitions.apply(specs, now=T0)

    async def waits_for() -> str:
        return str((await store.details("b"))["waits_for"])

    assert await waits_for() == "upstream a's slot 2026-01-01T00:00:10Z has not run yet"
    a10 = (await claim(open_session, at(10)))["a"]
    assert await waits_for() == "upstream a's slot 2026-01-01T00:00:10Z is running"
    await finish(open_session, a10, at(11), FAILED)
    assert await waits_for() == (
        "upstream a's slot 2026-01-01T00:00:10Z failed an attempt and waits for its retry"
    )
    retry = (await claim(open_session, at(16)))["a"]
    await finish(open_session, retry, at(17), FAILED)
    assert await waits_for() == "upstream a's slot 2026-01-01T00:00:10Z failed"


# -- removing an upstream ----------------------------------------------------------------------


async def test_removing_an_upstream_others_wait_for_is_refused_unless_cascade(
    store: JobStore, settings: ClusterSettings
) -> None:
    specs = [job("a"), job("b", "@after:a"), job("c", "@after:b"), job("x")]
    await store.definitions.apply(specs, now=T0)
    with pytest.raises(Conflict, match=r"b waits for 'a' \(1 more through it\): change or remove"):
        await store.remove("a")
    assert [j.name for j in await store.jobs()] == ["a", "b", "c", "x"]
    assert len(await rows(settings, "SELECT * FROM job_edges")) == 2
    assert await store.remove("a", cascade=True) == ["c", "b", "a"]
    assert [j.name for j in await store.jobs()] == ["x"]
    # Each removed job's last revision still names what it waited for.
    (c_removed, *_) = await store.revisions.history("c", "default")
    assert (c_removed.change, c_removed.definition["after"]) == ("removed", ["b"])


async def test_a_prune_that_would_orphan_a_downstream_is_refused(store: JobStore) -> None:
    await store.definitions.apply([job("a"), job("b", after="a")], now=T0)
    with pytest.raises(Conflict, match="b waits for 'a', which --prune removes"):
        await store.definitions.apply([job("b", after="a")], prune=True, now=T0)
    assert [j.name for j in await store.jobs()] == ["a", "b"]
    # The downstream changed in the same apply: nothing waits for a any more.
    result = await store.definitions.apply([job("b")], prune=True, now=T0)
    assert (result.updated, result.removed) == (["b"], ["a"])


def test_the_cli_refuses_to_remove_an_upstream_in_one_line(initialised: Invoke) -> None:
    pulse = initialised
    for name, extra in (("a", []), ("b", ["--after", "a"])):
        added = pulse("jobs", "add", name, "--schedule", "@hourly", "--handler", HANDLER, *extra)
        assert added.exit_code == 0, added.output
    assert_bad_input(pulse("jobs", "remove", "a"), "name")
    result = pulse("jobs", "remove", "a", "--cascade")
    assert result.exit_code == 0, result.output
    removed = ["removed b (tenant default)", "removed a (tenant default)"]
    assert result.stdout.splitlines() == removed
