"""Dependencies between jobs against a real Postgres: a gated slot is claimable only once its
upstreams' matching slots succeeded (each match rule, fan-in, failures, timeouts), the
release is written by the upstream's fenced completion, and bad edges are refused whole.
Database time is driven with explicit ``now=`` values (docs/design/gates.md)."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

import pytest

from cluster.errors import InvalidInput
from cluster.jobs.gates import DEFAULT_AFTER_TIMEOUT_S
from cluster.jobs.spec import JobSpec
from cluster.settings import ClusterSettings
from cluster.store.connect import connect
from cluster.store.jobstore.store import JobStore
from cluster.store.lock.records import ClaimedJob, Completion
from cluster.store.side import SideConnection
from node.maintenance.gatepass import IDLE_INTERVAL_S, INTERVAL_S, GatePass
from node.pipeline.outcomes import gate_skip
from node.state import NodeState
from tests.helpers.history import rows
from tests.helpers.outbox import add_rule
from tests.helpers.sessions import ALL, T0, Opener, at

HANDLER = "cluster.chaos.witness:record"


def job(name: str, schedule: str = "@every 10s", **kw: Any) -> JobSpec:
    return JobSpec.build(name, schedule, HANDLER, **kw)


def done(claimed: ClaimedJob, outcome: str, next_slot: datetime) -> Completion:
    return Completion(
        claimed.id, claimed.lease_token, claimed.slot, outcome, None, 0.1, next_slot, next_slot, 1
    )


async def claim(open_session: Opener, now: datetime) -> dict[str, ClaimedJob]:
    node = await open_session("node-a", "zone-a")
    return {j.name: j for j in (await node.claim(ALL, 50, 30.0, now=now)).jobs}


async def complete(open_session: Opener, *completions: Completion, now: datetime) -> None:
    node = await open_session("node-a", "zone-a")
    assert await node.completions.complete(list(completions), now=now) == {
        c.id for c in completions
    }


async def job_rows(settings: ClusterSettings) -> dict[str, dict[str, Any]]:
    found = await rows(settings, "SELECT * FROM jobs ORDER BY name")
    return {r["name"]: r for r in found}


# -- match rules ----------------------------------------------------------------------------


async def test_same_holds_the_slot_until_the_upstream_slot_succeeds(
    store: JobStore, settings: ClusterSettings, open_session: Opener
) -> None:
    await store.definitions.apply([job("a"), job("b", after="a")], now=T0)
    b = (await job_rows(settings))["b"]
    bound = at(10) + timedelta(seconds=DEFAULT_AFTER_TIMEOUT_S)  # held, never for good
    assert (b["gated"], b["gate_wait"], b["next_run_at"]) == (True, True, bound)
    # Only the upstream is due: the held slot takes no place in the claim.
    first = await claim(open_session, at(10))
    assert set(first) == {"a"}
    await complete(open_session, done(first["a"], "succeeded", at(20)), now=at(11))
    b = (await job_rows(settings))["b"]
    # Due from its release (the completion's time): lateness counts from there.
    assert (b["gate_wait"], b["next_run_at"], b["slot_at"]) == (False, at(11), at(10))
    second = await claim(open_session, at(11))
    assert set(second) == {"b"} and second["b"].slot == at(10)
    # B's next slot waits for A's slot 20, which is not run yet.
    await complete(open_session, done(second["b"], "succeeded", at(20)), now=at(12))
    assert (await job_rows(settings))["b"]["gate_wait"] is True


async def test_latest_pairs_with_the_upstream_slot_at_or_before(
    store: JobStore, settings: ClusterSettings, open_session: Opener
) -> None:
    await store.definitions.apply(
        [job("a"), job("b", "@every 15s", after="a", after_match="latest")], now=T0
    )
    first = await claim(open_session, at(10))
    assert set(first) == {"a"}  # b's slot 15 pairs with a's slot 10
    await complete(open_session, done(first["a"], "succeeded", at(20)), now=at(11))
    b = (await job_rows(settings))["b"]
    assert (b["gate_wait"], b["next_run_at"]) == (False, at(15))
    assert set(await claim(open_session, at(15))) == {"b"}


async def test_period_day_pairs_with_any_success_in_the_day(
    store: JobStore, settings: ClusterSettings, open_session: Opener
) -> None:
    made = T0 - timedelta(seconds=1)
    specs = [job("a", "0 0 * * *"), job("b", "@hourly", after="a", after_match="period:day")]
    await store.definitions.apply(specs, now=made)
    first = await claim(open_session, T0)
    assert set(first) == {"a"}
    await complete(open_session, done(first["a"], "succeeded", T0 + timedelta(days=1)), now=at(5))
    b = (await job_rows(settings))["b"]
    assert (b["gate_wait"], b["slot_at"], b["next_run_at"]) == (False, T0, at(5))  # released
    second = await claim(open_session, at(6))
    one = T0 + timedelta(hours=1)
    await complete(open_session, done(second["b"], "succeeded", one), now=at(7))
    # The day's next hours are open at once: their slots keep their own time.
    b = (await job_rows(settings))["b"]
    assert (b["gate_wait"], b["next_run_at"]) == (False, one)


async def test_fan_in_waits_for_every_upstream(
    store: JobStore, settings: ClusterSettings, open_session: Opener
) -> None:
    await store.definitions.apply([job("a"), job("b"), job("c", after="a,b")], now=T0)
    first = await claim(open_session, at(10))
    assert set(first) == {"a", "b"}
    await complete(open_session, done(first["a"], "succeeded", at(20)), now=at(11))
    assert (await job_rows(settings))["c"]["gate_wait"] is True
    await complete(open_session, done(first["b"], "succeeded", at(20)), now=at(12))
    assert (await job_rows(settings))["c"]["gate_wait"] is False
    assert set(await claim(open_session, at(12))) == {"c"}


# -- failures and timeouts --------------------------------------------------------------------


async def test_an_upstream_failure_blocks_by_default(
    store: JobStore, settings: ClusterSettings, open_session: Opener
) -> None:
    await store.definitions.apply([job("a"), job("b", after="a")], now=T0)
    first = await claim(open_session, at(10))
    await complete(open_session, done(first["a"], "failed", at(20)), now=at(11))
    assert (await job_rows(settings))["b"]["gate_wait"] is True
    assert set(await claim(open_session, at(12))) == set()


async def test_after_failure_run_releases_the_slot(
    store: JobStore, settings: ClusterSettings, open_session: Opener
) -> None:
    await store.definitions.apply([job("a"), job("b", after="a", after_failure="run")], now=T0)
    first = await claim(open_session, at(10))
    await complete(open_session, done(first["a"], "failed", at(20)), now=at(11))
    claimed = await claim(open_session, at(12))
    assert set(claimed) == {"b"}
    node = await open_session("node-a", "zone-a")
    assert await node.gate_verdicts([(claimed["b"].id, claimed["b"].slot)]) == {}


async def test_after_failure_skip_records_the_slot_skipped_with_its_reason(
    store: JobStore, settings: ClusterSettings, open_session: Opener
) -> None:
    await add_rule(settings, "all", "http://127.0.0.1:9/hook")
    await store.definitions.apply([job("a"), job("b", after="a", after_failure="skip")], now=T0)
    first = await claim(open_session, at(10))
    await complete(open_session, done(first["a"], "failed", at(20)), now=at(11))
    b = (await claim(open_session, at(12)))["b"]
    node = await open_session("node-a", "zone-a")
    verdicts = await node.gate_verdicts([(b.id, b.slot)])
    reason = "upstream a's slot 2026-01-01T00:00:10Z failed"
    assert verdicts == {(b.id, b.slot): f"skip: {reason}"}
    completion, _ = gate_skip(b, verdicts[(b.id, b.slot)], at(12))
    assert completion.outcome == "skipped" and completion.next_slot == at(20)
    await complete(open_session, completion, now=at(12))
    (run,) = await rows(settings, "SELECT * FROM runs WHERE job_name = 'b'")
    assert (run["status"], run["last_error"], run["scheduled_for"]) == ("skipped", reason, at(10))
    (event,) = await rows(settings, "SELECT * FROM alert_events WHERE job_name = 'b'")
    assert (event["event"], event["detail"]) == ("skipped", f"1 slot skipped: {reason}")
    b_row = (await job_rows(settings))["b"]
    assert (b_row["failed_slots"], b_row["slot_at"], b_row["gate_wait"]) == (0, at(20), True)


async def test_after_timeout_makes_the_held_slot_due_to_be_skipped(
    store: JobStore, settings: ClusterSettings, open_session: Opener
) -> None:
    await store.definitions.apply([job("a"), job("b", after="a", after_timeout="30s")], now=T0)
    assert (await job_rows(settings))["b"]["next_run_at"] == at(40)
    assert set(await claim(open_session, at(39))) == {"a"}
    b = (await claim(open_session, at(40)))["b"]
    node = await open_session("node-a", "zone-a")
    verdicts = await node.gate_verdicts([(b.id, b.slot)])
    assert verdicts == {(b.id, b.slot): "wait: upstream a's slot 2026-01-01T00:00:10Z is running"}
    completion, _ = gate_skip(b, verdicts[(b.id, b.slot)], at(40))
    assert (completion.outcome, completion.slot) == ("skipped", at(10))


# -- the release is never lost --------------------------------------------------------------


async def test_the_gate_pass_releases_what_a_locked_row_missed(
    store: JobStore, settings: ClusterSettings, open_session: Opener
) -> None:
    await store.definitions.apply([job("a"), job("b", after="a")], now=T0)
    first = await claim(open_session, at(10))
    blocker = await connect(settings, "blocker")
    try:
        await blocker.execute(b"BEGIN")
        await blocker.execute(b"SELECT 1 FROM jobs WHERE name = 'b' FOR UPDATE")
        # The completion does not wait for the locked downstream; it leaves it held.
        await complete(open_session, done(first["a"], "succeeded", at(20)), now=at(11))
        await blocker.execute(b"ROLLBACK")
    finally:
        await blocker.close()
    assert (await job_rows(settings))["b"]["gate_wait"] is True
    statement = "SELECT gate_release(NULL, %s::int[], %s) AS n"
    (released,) = await rows(settings, statement, (ALL, at(11.5)))
    assert released["n"] == 1
    assert set(await claim(open_session, at(12))) == {"b"}


# -- bad input --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("specs", "message"),
    [
        ([job("b", after="nope")], "unknown upstream 'nope' in tenant 'default'"),
        ([job("a", after="b"), job("b", after="a")], "cycle: "),
        ([job("a", after="a")], "cannot wait for itself"),
        ([job("a", "@daily"), job("b", "@hourly", after="a")], "is not a slot of a"),
        (
            [job("a", "@daily"), job("b", "@hourly", after="a", after_match="period:hour")],
            "a has no slot in the period",
        ),
    ],
)
async def test_bad_edges_are_refused_and_nothing_is_written(
    store: JobStore, settings: ClusterSettings, specs: list[JobSpec], message: str
) -> None:
    await store.definitions.apply([job("x")], now=T0)
    with pytest.raises(InvalidInput, match=message):
        await store.definitions.apply([job("x"), *specs], now=T0)
    assert set(await job_rows(settings)) == {"x"}
    assert await rows(settings, "SELECT * FROM job_edges") == []


async def test_an_upstream_of_another_tenant_is_unknown(
    store: JobStore, settings: ClusterSettings
) -> None:
    await store.definitions.apply([job("a", tenant="other")], now=T0)
    with pytest.raises(InvalidInput, match="unknown upstream 'a' in tenant 'default'"):
        await store.definitions.apply([job("b", after="a")], now=T0)


async def test_a_three_job_cycle_is_named(store: JobStore) -> None:
    await store.definitions.apply([job("a"), job("b", after="a"), job("c", after="b")], now=T0)
    with pytest.raises(InvalidInput) as refused:
        await store.definitions.apply(
            [job("a", after="c"), job("b", after="a"), job("c", after="b")], now=T0
        )
    assert "cycle: " in str(refused.value)
    assert all(name in str(refused.value) for name in "abc")


async def test_removing_the_last_upstream_frees_a_held_slot(
    store: JobStore, settings: ClusterSettings
) -> None:
    await store.definitions.apply([job("a"), job("b", after="a")], now=T0)
    result = await store.definitions.apply([job("a"), job("b")], now=T0)
    assert result.updated == ["b"]
    b = (await job_rows(settings))["b"]
    assert (b["gated"], b["gate_wait"], b["next_run_at"]) == (False, False, at(10))


async def test_a_handlers_skip_is_recorded_with_its_reason_not_as_catch_up(
    store: JobStore, settings: ClusterSettings, open_session: Opener
) -> None:
    await add_rule(settings, "all", "http://127.0.0.1:9/hook")
    await store.definitions.apply([job("a", retries=3)], now=T0)
    a = (await claim(open_session, at(10)))["a"]
    skipped = done(a, "skipped", at(20))._replace(error="no new rows")
    await complete(open_session, skipped, now=at(11))
    (run,) = await rows(settings, "SELECT * FROM runs")
    assert (run["status"], run["last_error"]) == ("skipped", "no new rows")
    (event,) = await rows(settings, "SELECT * FROM alert_events")
    assert event["detail"] == "1 slot skipped: no new rows"
    row = (await job_rows(settings))["a"]
    assert (row["slot_at"], row["slot_origin"], row["failed_slots"]) == (at(20), None, 0)


async def test_the_gate_pass_asks_often_only_while_a_slot_is_held(
    store: JobStore, settings: ClusterSettings
) -> None:
    state = NodeState("n1", "zone-a", 16, held=frozenset(ALL))
    gates = GatePass(SideConnection(settings, "n1/gates", statement_timeout_s=5.0), state)
    try:
        await store.definitions.apply([job("a")], now=T0)
        assert await gates.run_once() == IDLE_INTERVAL_S
        await store.definitions.apply([job("a"), job("b", after="a")], now=T0)
        assert await gates.run_once() == INTERVAL_S  # b waits for a's slot 10
    finally:
        await gates.close()


async def test_a_deleted_upstream_drops_its_edges_and_the_pass_frees_the_slot(
    store: JobStore, settings: ClusterSettings
) -> None:
    """`pulse jobs remove` refuses an upstream others wait for (test_bounded_waits.py); one
    deleted otherwise (a done one-off removed, SQL) leaves no slot held."""
    await store.definitions.apply([job("a"), job("b", after="a")], now=T0)
    await rows(settings, "DELETE FROM jobs WHERE name = 'a' RETURNING id")
    assert await rows(settings, "SELECT * FROM job_edges") == []
    statement = "SELECT gate_release(NULL, %s::int[], %s) AS n"
    (released,) = await rows(settings, statement, (ALL, at(1)))
    assert released["n"] == 1
    assert (await job_rows(settings))["b"]["next_run_at"] == at(10)
