"""Which expectation event the late pass raises for a run going on (``due_event``): overdue
past the deadline, slow past the maximum or the baseline (with enough kept runs), one per
pass, never one the run already had."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

from node.maintenance.lateness import due_event

SLOT = datetime(2026, 6, 1, 5, 0, tzinfo=UTC)


def row(running_s: float, **kw: Any) -> dict[str, Any]:
    found = {
        "id": uuid.uuid4(), "tenant_id": "t", "name": "j", "tz": "UTC", "deadline": None,
        "expect_max_s": None, "expect_baseline": None, "slot": SLOT, "lease_token": 7,
        "flight": False, "marks": None, "db_now": SLOT + timedelta(seconds=running_s),
        "running_s": running_s, "p95_s": None, "baseline_runs": 0,
    }  # fmt: skip
    return {**found, **kw}


def event(r: dict[str, Any]) -> str | None:
    found = due_event(r)
    return None if found is None else found.event


def test_slow_past_the_maximum() -> None:
    assert event(row(59, expect_max_s=60.0)) is None
    assert event(row(61, expect_max_s=60.0)) == "slow"
    assert event(row(61, expect_max_s=60.0, marks=["slow"])) is None


def test_overdue_first_then_slow_on_the_next_pass() -> None:
    both = row(3700, expect_max_s=60.0, deadline="06:00")
    assert event(both) == "overdue"
    assert event({**both, "marks": ["overdue"]}) == "slow"
    assert event({**both, "marks": ["overdue", "slow"]}) is None
    assert event(row(3599, deadline="06:00")) is None


def test_a_baseline_needs_enough_runs() -> None:
    base = {"expect_baseline": 3.0, "p95_s": 10.0}
    assert event(row(31, **base, baseline_runs=4)) is None
    assert event(row(29, **base, baseline_runs=5)) is None
    found = due_event(row(31, **base, baseline_runs=5))
    assert found is not None and (found.event, found.token) == ("slow", 7)
    assert found.detail == "running for 31s, over 3x the p95 (10s) of its last 5 successful runs"
