"""The walk of passed slots (``cluster.timing.passing``): a job's own slot is passed even
when its timing has no slot after it up to the clock, as when the slot was kept from before
a change of timing (``Schedule.starting``) and the new timing has none yet."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from cluster.timing.passing import Timing, passed
from cluster.timing.schedule import Schedule

T0 = datetime(2026, 1, 1, tzinfo=UTC)
MINUTE = timedelta(minutes=1)


def test_the_jobs_slot_is_passed_with_the_slots_after_it() -> None:
    timing = Timing(Schedule("@every 1m"), None)
    found = passed(timing, T0, T0 + 2 * MINUTE + timedelta(seconds=5), "moved")
    assert [(slot, why) for slot, why, _ in found] == [
        (T0, "moved"),
        (T0 + MINUTE, "moved"),
        (T0 + 2 * MINUTE, "moved"),
    ]


def test_a_slot_from_before_the_timing_is_passed_with_no_slot_after_it() -> None:
    timing = Timing(Schedule("@every 1m").starting(T0 + timedelta(seconds=20)), None)
    found = passed(timing, T0, T0 + timedelta(seconds=40), "moved")
    assert [(slot, why) for slot, why, _ in found] == [(T0, "moved")]
    assert passed(timing, T0 + MINUTE, T0 + timedelta(seconds=40), "moved") == []
