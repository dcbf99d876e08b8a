"""The claim loop: claim due jobs of held shards, up to the free execution slots.

It sleeps until the earliest ``next_run_at`` of its shards (reported by the claim statement
itself, and by completions for the slots they set) or the poll interval, whichever is
sooner, and wakes at once on NOTIFY, on gaining shards, and when a full executor frees a
slot. After a claim that took nothing it sleeps until ``next_run_at`` or its idle interval
(``idle_poll_s``: twice the poll interval, short enough that its lock session never idles
past the peers' freeze limit; docs/design/beat.md): a write that makes a job due sooner
NOTIFYs its shard, so the interval only bounds a lost notification. A job passed over for a
named limit wakes it by NOTIFY when a run gives a place back, and a rate key's token, which
time alone gives back, by the claim's ``next_due``: it reports when the window reopens.

It claims only while the lock session is trusted: if the session has not answered within
``session_timeout - margin`` the node may already have lost its locks, so it claims
nothing.

While more is due than the node can run (its last claim took all it asked for), the claim
takes jobs across tenants in turn, oldest first within each (fair fan-out, unless the node
runs with ``--no-fairness``; docs/design/fairness.md). A claim that passed due jobs over
(a tenant at its limit of concurrent runs) is followed at once by one across tenants, with
or without fairness, so the jobs of a tenant at its limit never hide the others'; a place
given back wakes the loop through NOTIFY.

A claimed slot of an overlap ``allow`` job is handed to a flight (``Completer.spawn``) and
runs once that is written; queued flights (retries, and those taken back from dead nodes)
are claimed every ``FLIGHT_POLL_S`` once the node has seen any, else every
``FLIGHT_IDLE_POLL_S`` (docs/design/overlap.md); a NOTIFY of a held shard (a trigger, a
rerun, a restarted node's orphans, a drain's releases) and a gained shard make the next
claim take them too.
"""

from __future__ import annotations

import asyncio
import logging
import time
from datetime import datetime

from cluster.errors import PulseError, StoreError
from cluster.store.lock.records import ClaimedJob, Completion, Skip
from cluster.store.lock.session import LockSession
from cluster.timing.fate import Fate
from node.pipeline.clock import DbClock
from node.pipeline.completer import Completer, job_extra
from node.pipeline.executor import Executor
from node.pipeline.outcomes import claim_fate, gate_skip, skipped_at_claim
from node.pipeline.pacing import CLAIM_AHEAD_S, WAKE_MARGIN_S, Pacing
from node.service import Failures, until_beat
from node.state import NodeState
from node.stats import Stats

logger = logging.getLogger(__name__)

MAX_CLAIM = 500
# Each claim also takes the jobs due in this much time after that wake-up's, so jobs due
# one after another come in batches rather than a claim each; a job claimed ahead holds
# its slot idle until it falls due (tests/integration/test_node_claimer.py).
CLAIM_BATCH_S = 0.1
SLOT_BATCH_WINDOW_S = 0.005
FLIGHT_POLL_S = 2.0
# Bounds a lost NOTIFY: writes that queue flights NOTIFY their shard (a trigger, a rerun, a
# restarted node's orphans, a drain's releases), and a gained shard is asked at once. A
# multiple of the idle claim interval, so it falls on a claim's beat.
FLIGHT_IDLE_POLL_S = 20.0
# The longest sleep after a claim that took nothing (see ``idle_poll_s``).
IDLE_POLL_S = 2.0


def idle_poll_s(poll_s: float, freeze_limit_s: float, session_timeout_s: float) -> float:
    """The claim loop's sleep after a claim that took nothing, at most: twice the poll
    interval, up to ``IDLE_POLL_S``, and short enough that the lock session, which the
    claim keeps busy, never idles past the freeze limit (peers judge a node frozen by a
    stale heartbeat and an idle session) nor near its session timeout; never below the
    poll interval. A beat falls up to 1.25 periods away (``until_beat``)."""
    keepalive = session_timeout_s / 4
    if freeze_limit_s > 0:
        keepalive = min(keepalive, (freeze_limit_s - 0.5) / 1.25)
    return max(poll_s, min(2 * poll_s, IDLE_POLL_S, keepalive))


class Claimer:
    def __init__(
        self,
        state: NodeState,
        session: LockSession,
        executor: Executor,
        completer: Completer,
        clock: DbClock,
        stats: Stats,
        pacing: Pacing,
        *,
        poll_interval_s: float,
        lease_s: float,
        trust_margin_s: float,
        fairness: bool = True,
        idle_interval_s: float | None = None,
    ) -> None:
        self._state = state
        self._session = session
        self._executor = executor
        self._completer = completer
        self._clock = clock
        self._stats = stats
        self._pacing = pacing
        self._poll_s = poll_interval_s
        self._idle_s = poll_interval_s if idle_interval_s is None else idle_interval_s
        self._lease_s = lease_s
        self._margin_s = trust_margin_s
        self._failures = Failures("claims")
        self._flights_at = 0.0  # monotonic time of the next claim of queued flights
        self._flights_seen = False
        self._flights_held: frozenset[int] = frozenset()  # the shards of the last flight claim
        self._fairness = fairness
        self._full = False  # the last claim took all it asked for: more is due than it runs
        self._held = False  # the last claim passed a due job over (a tenant at its limit)

    def flights_queued(self) -> None:
        """Flights may be due in held shards (taken back from a dead node): claim them soon."""
        self._flights_seen = True
        self._flights_at = 0.0

    async def run_once(self) -> float:
        """Claim once; return how long to sleep before the next claim."""
        held = self._state.held
        if not self._session.trusted(self._margin_s):
            self._pacing.set_catching_up(False)
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
        # A claim that passed jobs over reads across tenants next, even without fairness:
        # else the oldest jobs of a tenant at its limit would hide the other tenants' jobs.
        fair = (self._fairness and self._full) or self._held
        if self._state.tenants_written:  # the tenant list may lack a tenant written since
            self._state.tenants_written = False
            self._session.tenants.forget()
        result = await self._session.claim(held, limit, self._lease_s, ahead_s=ahead_s, fair=fair)
        elapsed = time.monotonic() - started
        # db_now (the statement's start) is a lower bound of the database clock now; `elapsed`
        # also holds waits for the session and the backend, so adding it could start a run
        # claimed ahead before its slot (S4, tests/e2e/test_nodes.py).
        self._clock.observe(result.db_now)
        self._stats.claims += 1
        self._stats.claim_seconds.append(elapsed)
        now = self._clock.now()  # one reading for the batch: they arrived together
        gated = [(job.id, job.slot) for job in result.jobs if job.gated and job.attempt == 1]
        verdicts = await self._session.gate_verdicts(gated) if gated else {}
        for job in result.jobs:
            self._dispatch(job, now, verdicts.get((job.id, job.slot)))
        self._full = len(result.jobs) >= limit
        self._held = result.held
        self._pacing.set_catching_up(self._full)
        if self._full:
            return 0.0  # more may be due: claim again as soon as slots allow
        if self._held and not fair:
            return 0.0  # at once, across tenants: jobs behind those passed over may be due
        if self._state.member_runs.is_set():  # each-node runs queued for this member
            self._state.member_runs.clear()
            self.flights_queued()
        if self._state.flights_written or held - self._flights_held:
            self._state.flights_written = False
            self._flights_at = 0.0
        if self._executor.free > 0 and time.monotonic() >= self._flights_at:
            self._flights_held = held
            await self._claim_flights(now)
        # Nothing taken: nothing is due before next_due but what a NOTIFY will announce.
        poll_s = self._poll_s if result.jobs else self._idle_s
        delay = min(until_beat(poll_s), max(0.0, self._flights_at - time.monotonic()))
        if result.next_due is not None:
            until_due = (result.next_due - result.db_now).total_seconds() - elapsed
            until_due -= CLAIM_AHEAD_S
            delay = min(delay, max(0.0, until_due + WAKE_MARGIN_S))
        return delay

    async def _claim_flights(self, now: datetime) -> None:
        limit = min(self._executor.free, MAX_CLAIM)
        flights = await self._session.flights.claim(
            self._state.held, limit, self._lease_s, ahead_s=CLAIM_AHEAD_S + CLAIM_BATCH_S
        )
        # A backfilled or rerun slot of a job with upstreams: its gate, asked again now.
        gated = [(f.id, f.slot) for f in flights if f.gated and f.attempt == 1]
        verdicts = await self._session.gate_verdicts(gated) if gated else {}
        for flight in flights:
            verdict = verdicts.get((flight.id, flight.slot))
            if verdict is not None:
                self._skip(flight, gate_skip(flight, verdict, now))
                continue
            self._executor.submit(flight, max(0.0, (flight.due - now).total_seconds()))
        self._flights_seen = self._flights_seen or bool(flights)
        wait_s = FLIGHT_POLL_S if self._flights_seen else FLIGHT_IDLE_POLL_S
        # On this process's beat, so the flight poll never wakes the loop (and claims) by itself.
        self._flights_at = time.monotonic() + (0.0 if len(flights) >= limit else until_beat(wait_s))

    def _dispatch(self, job: ClaimedJob, now: datetime, verdict: str | None = None) -> None:
        decided: Fate | None = None
        skip: tuple[Completion, list[Skip]] | None = None
        try:
            # A gated slot claimed at its after-timeout, or whose upstream failed under
            # after-failure skip, is recorded skipped (tests/integration/test_gates.py);
            # any other slot's fate is decided once, here (cluster.timing.fate).
            if verdict is not None:
                skip = gate_skip(job, verdict, now)
            else:
                decided = claim_fate(job, now)
                skip = None if decided.runs else skipped_at_claim(job, decided)
        except PulseError as exc:
            self._completer.reject(job, exc)
            return
        if skip is not None or decided is None:
            assert skip is not None, "a gate's verdict is a skip"
            self._skip(job, skip)
            return
        self._stats.fired += 1
        # Lag counts from the slot's start (moved, deferred, jittered).
        self._stats.fire_lag_seconds.append(max(0.0, (now - decided.start).total_seconds()))
        # An `allow` slot runs as a flight once it is handed over; an each-node slot is
        # fanned out to the members, this node's run starting here (docs/design/each-node.md).
        if job.overlap == "allow" or job.each_node:
            self._flights_seen = True
            self._executor.reserve()
            self._completer.spawn(job, self._start_flight)
            return
        start_in_s = (job.due - now).total_seconds()
        if start_in_s > 0:
            self._pacing.claimed_ahead(start_in_s)
        replace_in_s = None
        if job.overlap == "replace":  # a run still going when the next slot is due stops
            replace_in_s = (decided.next_start - now).total_seconds()
        self._executor.submit(job, start_in_s, replace_in_s)

    def _skip(self, job: ClaimedJob, skip: tuple[Completion, list[Skip]]) -> None:
        done, skips = skip
        logger.info("slot skipped: %s", done.error, extra=job_extra(job, "slot_skipped"))
        self._completer.submit(job, done, skips)

    def _start_flight(self, flight: ClaimedJob | None) -> None:
        """An `allow` claim handed over: run its flight in the slot held for it; None: it got
        no flight, so the slot is free again."""
        if flight is None:
            self._executor.unreserve()
            return
        start_in_s = max(0.0, (flight.due - self._clock.now()).total_seconds())
        self._executor.submit(flight, start_in_s, reserved=True)

    async def run(self, stop: asyncio.Event) -> None:
        wake = self._state.wake
        while not stop.is_set() and self._state.claiming:
            wake.clear()
            self._executor.slot_freed.clear()
            try:
                delay = await self.run_once()
                self._failures.succeeded()
            except StoreError as exc:
                self._pacing.set_catching_up(False)
                self._stats.db_errors += 1
                self._failures.failed(exc)
                delay = self._failures.backoff_s(0.1, 2.0)
            events = [stop, wake]
            if self._executor.free <= 0:
                events.append(self._executor.slot_freed)
            await self._pacing.sleep(delay, *events)
            if self._executor.slot_freed.is_set() and not (wake.is_set() or stop.is_set()):
                # Slots free one by one as runs end; a moment's wait lets the next claim
                # fill many at once instead of paying a round trip per slot.
                await asyncio.sleep(SLOT_BATCH_WINDOW_S)
        self._pacing.set_catching_up(False)  # no more claims: nothing for completions to wait for
