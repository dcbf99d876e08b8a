"""``ctx.state`` in a handler: changes reported only when made, JSON objects only, size-capped;
a successful run whose state cannot be kept fails rather than losing its cursor."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime

import pytest

from node.handlers.context import MAX_STATE_BYTES, RunContext, finished


def context(state: dict[str, object] | None = None) -> RunContext:
    slot = datetime(2026, 1, 1, tzinfo=UTC)
    return RunContext(uuid.uuid4(), "j", "t", {}, slot, 1, 30.0, "n1", "z", state=state or {})


def test_an_unchanged_state_is_not_written() -> None:
    assert finished(context(), None, 0.1).state is None
    assert finished(context({"cursor": 3}), None, 0.1).state is None


def test_a_change_in_place_or_by_set_state_is_written() -> None:
    ctx = context({"cursor": 3})
    ctx.state["cursor"] = 4
    assert finished(ctx, None, 0.1).state == '{"cursor": 4}'
    ctx.set_state({"cursor": 5, "seen": ["é"]})
    assert finished(ctx, None, 0.1).state == '{"cursor": 5, "seen": ["é"]}'
    with pytest.raises(TypeError):
        ctx.set_state([1, 2])  # type: ignore[arg-type]


def test_a_state_too_large_or_not_json_fails_the_run() -> None:
    ctx = context()
    ctx.state["blob"] = "x" * MAX_STATE_BYTES
    outcome = finished(ctx, None, 0.1)
    assert (outcome.status, outcome.error, outcome.state) == (
        "failed",
        "ctx.state is larger than 64 KiB",
        None,
    )
    ctx.set_state({"when": datetime(2026, 1, 1, tzinfo=UTC)})
    assert finished(ctx, None, 0.1).status == "failed"


def test_a_failed_run_writes_no_state() -> None:
    ctx = context({"cursor": 3})
    ctx.state["cursor"] = 4
    assert finished(ctx, RuntimeError("boom"), 0.1).state is None


def test_testing_context_takes_the_incremental_fields() -> None:
    from pulsecron import testing

    slot = datetime(2026, 1, 1, tzinfo=UTC)
    ctx = testing.context(previous_slot=slot, last_success_slot=slot, state={"cursor": 1})

    def handler(ctx: RunContext) -> None:
        ctx.state["cursor"] += 1

    testing.run(handler, ctx)
    assert (ctx.previous_slot, ctx.last_success_slot, ctx.state) == (slot, slot, {"cursor": 2})
