"""Where a job goes after a run: the fast path (next slot still ahead) and the catch-up
path must agree with the catch-up planner."""

from __future__ import annotations

from datetime import timedelta

from node.handlers.context import Outcome
from node.pipeline.outcomes import PAUSED_REASON, after_run, following_slot
from tests.helpers.claimed import job

OK = Outcome("succeeded", None, 0.01)


def test_next_slot_still_ahead_moves_on_without_skips() -> None:
    j = job("m:f")._replace(schedule="@every 1m")
    done, skips = after_run(j, OK, j.slot + timedelta(seconds=5))
    assert done.next_slot == done.next_run_at == j.slot + timedelta(minutes=1)
    assert (done.outcome, done.next_attempt, skips) == ("succeeded", 1, [])


def test_next_slot_already_past_follows_the_catch_up_policy() -> None:
    j = job("m:f")._replace(schedule="@every 1m", catch_up="once")
    done, skips = after_run(j, OK, j.slot + timedelta(minutes=3, seconds=5))
    assert done.next_slot == j.slot + timedelta(minutes=3)  # coalesced into the newest
    assert [s.slot for s in skips] == [j.slot + timedelta(minutes=m) for m in (1, 2)]


def test_failure_with_retries_left_retries_the_same_slot() -> None:
    j = job("m:f")._replace(retries=2, retry_backoff_s=10.0)
    now = j.slot + timedelta(seconds=1)
    done, skips = after_run(j, Outcome("failed", "boom", 0.1), now)
    assert (done.next_slot, done.next_attempt, skips) == (j.slot, 2, [])
    assert done.next_run_at == now + timedelta(seconds=10)


def test_the_next_slot_is_told_apart_per_definition_and_slot() -> None:
    minute = job("m:f")._replace(schedule="@every 1m")
    hour = minute._replace(schedule="@every 1h")
    later = minute._replace(slot=minute.slot + timedelta(minutes=1))
    kolkata = minute._replace(schedule="0 * * * *", tz="Asia/Kolkata")  # UTC+05:30
    utc = kolkata._replace(tz="UTC")
    for _ in range(2):  # answers come from memory the second time round
        assert following_slot(minute) == minute.slot + timedelta(minutes=1)
        assert following_slot(hour) == minute.slot + timedelta(hours=1)
        assert following_slot(later) == minute.slot + timedelta(minutes=2)
        assert following_slot(minute) == minute.slot + timedelta(minutes=1)
        assert following_slot(kolkata) == minute.slot + timedelta(minutes=30)
        assert following_slot(utc) == minute.slot + timedelta(hours=1)


def test_a_failed_slot_lists_the_slots_due_should_it_pause_the_job() -> None:
    """Whether the failure pauses the job (--pause-after-failures) the completion statement
    decides; the slots due by then go with it, written only if it does."""
    j = job("m:f")._replace(schedule="@every 1m", catch_up="backfill")
    now = j.slot + timedelta(minutes=3, seconds=5)
    done, skips = after_run(j, Outcome("failed", "boom", 0.1), now)
    assert done.next_slot == j.slot + timedelta(minutes=1)  # backfill: the oldest due next
    owed = [(s.slot, s.if_paused) for s in skips]
    assert owed == [(j.slot + timedelta(minutes=m), True) for m in (1, 2, 3)]
    assert skips[0].reason == PAUSED_REASON
    assert after_run(j, OK, now)[1] == []  # a success pauses nothing
    ahead = after_run(j, Outcome("failed", "boom", 0.1), j.slot + timedelta(seconds=5))
    assert ahead[1] == []  # its next slot is still to come: nothing owed
