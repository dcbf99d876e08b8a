"""The claim loop: claim due jobs of held shards, up to the free execution slots.

It sleeps until the earliest ``next_run_at`` of its shards (reported by the claim statement
itself, and by completions for the slots they set) or the poll interval, whichever is
sooner, and wakes at once on NOTIFY, on gaining shards, and when a full executor frees a
slot. It claims only while the lock session is trusted: if the session has not answered
within ``session_timeout - margin`` the node may already have lost its locks, so it claims
nothing.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from datetime import datetime, timedelta

from cluster.errors import PulseError, StoreError
from cluster.store.records import ClaimedJob
from cluster.store.session import LockSession
from node.clock import DbClock
from node.completer import Completer, _job_extra
from node.executor import Executor
from node.outcomes import plan_at_claim
from node.service import Failures, Signal, until_beat, wait_any
from node.state import NodeState
from node.stats import Stats

logger = logging.getLogger(__name__)

MAX_CLAIM = 500
WAKE_MARGIN_S = 0.002
# The loop wakes this long before the next job falls due, and the executor starts the
# jobs it claims when they fall due: the claim's round trip is paid before the slot, not
# after it.
CLAIM_AHEAD_S = 0.1
# Each claim also takes the jobs due in this much time after that wake-up's, so jobs due
# one after another (a million schedules spread over the hour) come in batches, a claim
# per CLAIM_BATCH_S at most, rather than a claim each. A claimed job holds its execution
# slot idle until it falls due: at most CLAIM_AHEAD_S + CLAIM_BATCH_S.
CLAIM_BATCH_S = 0.1
SLOT_BATCH_WINDOW_S = 0.005


class Claimer:
    def __init__(
        self,
        state: NodeState,
        session: LockSession,
        executor: Executor,
        completer: Completer,
        clock: DbClock,
        stats: Stats,
        *,
        poll_interval_s: float,
        lease_s: float,
        trust_margin_s: float,
    ) -> None:
        self._state = state
        self._session = session
        self._executor = executor
        self._completer = completer
        self._clock = clock
        self._stats = stats
        self._poll_s = poll_interval_s
        self._lease_s = lease_s
        self._margin_s = trust_margin_s
        self._failures = Failures("claims")
        self._wake_at = math.inf  # monotonic time of the next planned claim
        self._sooner = Signal()
        # The last claim was full: more is due, and the loop claims again as slots free.
        # Completions wait meanwhile (see node/completer.py).
        self._catching_up = False

    def _set_catching_up(self, full: bool) -> None:
        if full != self._catching_up:
            self._catching_up = full
            self._completer.defer_writes(full)

    def due_at(self, when: datetime) -> None:
        """A job of this node falls due at ``when`` (database time); claim then if that is
        sooner than planned. Completions call this: the next slot they write was not there
        for the claim that planned the current sleep (the job was running then)."""
        until = (when - self._clock.now()).total_seconds() - CLAIM_AHEAD_S
        at = time.monotonic() + until + WAKE_MARGIN_S
        if at < self._wake_at:
            self._wake_at = at
            self._sooner.set()

    async def run_once(self) -> float:
        """Claim once; return how long to sleep before the next claim."""
        held = self._state.held
        if not self._session.trusted(self._margin_s):
            self._set_catching_up(False)
            if held:
                self._stats.locks_lost += self._state.session_untrusted()
            return self._poll_s
        free = self._executor.free
        if free <= 0:
            # No claim while every slot is busy, but the lock session must not look idle
            # to Postgres, or it would end the session and the node would lose its shards.
            if time.monotonic() - self._session.last_ok >= self._poll_s:
                self._clock.observe(await self._session.ping())
            # Runs that ended during the ping freed slots without waking the loop (it only
            # listens for that while the executor is full): claim again at once.
            return 0.0 if self._executor.free > 0 else self._poll_s
        limit = min(free, MAX_CLAIM)
        started = time.monotonic()
        ahead_s = CLAIM_AHEAD_S + CLAIM_BATCH_S
        result = await self._session.claim(held, limit, self._lease_s, ahead_s=ahead_s)
        elapsed = time.monotonic() - started
        # db_now is when the statement started; by now the database clock is `elapsed` on
        # (less the tiny send latency). A clock that lags would make every wake-up late.
        self._clock.observe(result.db_now + timedelta(seconds=elapsed))
        self._stats.claims += 1
        self._stats.claim_seconds.append(elapsed)
        now = self._clock.now()  # one reading for the batch: they arrived together
        for job in result.jobs:
            self._dispatch(job, now)
        self._set_catching_up(len(result.jobs) >= limit)
        if len(result.jobs) >= limit:
            return 0.0  # more may be due: claim again as soon as slots allow
        delay = until_beat(self._poll_s)
        if result.next_due is not None:
            until_due = (result.next_due - result.db_now).total_seconds() - elapsed
            until_due -= CLAIM_AHEAD_S
            delay = min(delay, max(0.0, until_due + WAKE_MARGIN_S))
        return delay

    def _dispatch(self, job: ClaimedJob, now: datetime) -> None:
        try:
            skip = plan_at_claim(job, now)
        except PulseError as exc:
            self._completer.reject(job, exc)
            return
        if skip is not None:
            done, skips = skip
            logger.info("slot skipped: %s", done.error, extra=_job_extra(job, "slot_skipped"))
            self._completer.submit(job, done, skips)
            return
        self._stats.fired += 1
        self._stats.fire_lag_seconds.append(max(0.0, (now - job.slot).total_seconds()))
        self._executor.submit(job, start_in_s=(job.due - now).total_seconds())

    async def run(self, stop: asyncio.Event) -> None:
        wake = self._state.wake
        while not stop.is_set() and self._state.claiming:
            wake.clear()
            self._executor.slot_freed.clear()
            self._wake_at = math.inf  # due_at() during the claim lowers it
            try:
                delay = await self.run_once()
                self._failures.succeeded()
            except StoreError as exc:
                self._set_catching_up(False)
                self._stats.db_errors += 1
                self._failures.failed(exc)
                delay = self._failures.backoff_s(0.1, 2.0)
            events = [stop, wake]
            if self._executor.free <= 0:
                events.append(self._executor.slot_freed)
            self._wake_at = min(self._wake_at, time.monotonic() + delay)
            while True:
                self._sooner.clear()
                await wait_any(self._wake_at - time.monotonic(), *events, self._sooner)
                if not self._sooner.is_set() or any(e.is_set() for e in events):
                    break
            if self._executor.slot_freed.is_set() and not (wake.is_set() or stop.is_set()):
                # Slots free one by one as runs end; a moment's wait lets the next claim
                # fill many at once instead of paying a round trip per slot.
                await asyncio.sleep(SLOT_BATCH_WINDOW_S)
        self._set_catching_up(False)  # no more claims: nothing for completions to wait for
