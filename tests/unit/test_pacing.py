"""Pacing between the claim loop and the completer: whether more runs are about to finish,
and the claim loop's sleep, cut short by a slot a completion wrote."""

from __future__ import annotations

import asyncio
import time
from datetime import timedelta

from node.pipeline.clock import DbClock
from node.pipeline.pacing import CLAIM_AHEAD_S, Pacing


async def test_more_runs_are_coming_while_catching_up_or_until_runs_claimed_ahead_start() -> None:
    pacing = Pacing(DbClock())
    assert not pacing.more_coming
    pacing.set_catching_up(True)
    assert pacing.more_coming and not pacing.caught_up.is_set()
    pacing.set_catching_up(False)
    assert not pacing.more_coming and pacing.caught_up.is_set()
    pacing.caught_up.clear()
    pacing.set_catching_up(False)
    assert not pacing.caught_up.is_set(), "only the end of catching up is signalled"

    pacing.claimed_ahead(0.05)
    pacing.claimed_ahead(0.0)  # an earlier start does not shorten the wait
    assert pacing.more_coming
    await asyncio.sleep(0.06)
    assert not pacing.more_coming


async def test_the_claim_loop_sleeps_its_delay_or_until_an_event() -> None:
    pacing = Pacing(DbClock())
    started = time.monotonic()
    await pacing.sleep(0.05)
    assert time.monotonic() - started >= 0.04
    event = asyncio.Event()
    asyncio.get_running_loop().call_soon(event.set)
    await asyncio.wait_for(pacing.sleep(60.0, event), 5.0)


async def test_a_sooner_slot_cuts_the_sleep_short_and_a_later_one_does_not() -> None:
    clock = DbClock()
    pacing = Pacing(clock)
    sleep = asyncio.create_task(pacing.sleep(60.0))
    await asyncio.sleep(0)
    pacing.due_at(clock.now() + timedelta(seconds=120))
    await asyncio.sleep(0.01)
    assert not sleep.done()
    pacing.due_at(clock.now() + timedelta(seconds=CLAIM_AHEAD_S))
    await asyncio.wait_for(sleep, 5.0)


async def test_a_slot_written_during_the_claim_counts_for_the_sleep_after_it() -> None:
    clock = DbClock()
    pacing = Pacing(clock)
    pacing.due_at(clock.now())  # while the claim loop was claiming
    await asyncio.wait_for(pacing.sleep(60.0), 5.0)
    # ... and only for that sleep.
    started = time.monotonic()
    await pacing.sleep(0.05)
    assert time.monotonic() - started >= 0.04
