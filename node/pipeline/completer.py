"""Writes run outcomes back to Postgres: batched, fenced, shielded, retried.

Finished runs and claim-time skips queue here; one loop writes everything queued in one
``complete`` statement. While more runs are about to finish (``Pacing.more_coming``: the
claim loop is catching up, or runs it claimed ahead have yet to start) the write waits, up
to ``MAX_DEFER_S`` or a full batch, so completions go in fewer, larger statements and the
claims that start due runs go first. Slots are freed when runs end, not when their
completions are written, so the wait never holds back a claim (tests/unit/test_completer.py).

The write runs under ``asyncio.shield`` so a shutdown cannot lose it, and a failed write
is retried with backoff: a completion whose lease still holds is applied whenever the
database answers again; a stale one is fenced, counted and logged.

A run that used ``ctx.transaction()`` is completed on its own, inside the handler's
transaction, when it succeeded (``node.handlers.effects``); its effects are rolled back otherwise.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from datetime import datetime
from typing import TYPE_CHECKING
from uuid import UUID

from cluster.errors import PulseError, StoreError
from cluster.jobs.models import RunStatus
from cluster.settings import DEFAULT_LEASE_S
from cluster.store.lock.completions import Completions
from cluster.store.lock.records import ClaimedJob, Completion, Skip
from node.handlers.context import Outcome
from node.handlers.effects import Effects, Pending
from node.pipeline.checks import checked
from node.pipeline.clock import DbClock
from node.pipeline.outcomes import after_run, broken
from node.pipeline.pacing import Pacing
from node.service import Failures, Signal, wait_any
from node.stats import Stats

if TYPE_CHECKING:
    from node.handlers.traces import Tracing

logger = logging.getLogger(__name__)

MAX_BATCH = 500
# How long a finished run's completion may wait while the claim loop catches up. Well
# under any lease, and short enough that a job's next slot is written long before it
# falls due (a slot is at least a second after the one that ran).
MAX_DEFER_S = 0.1
IDLE_WAIT_S = 3600.0


Entry = tuple[ClaimedJob, Completion, list[Skip]]
SPAWNED = "spawned"  # the outcome of an `allow` claim: its slot goes to a flight
# Told of an `allow` claim handed over: its flight to run, or None (no flight).
Spawned = Callable[[ClaimedJob | None], None]


class Completer:
    def __init__(
        self,
        completions: Completions,
        clock: DbClock,
        stats: Stats,
        wake: asyncio.Event,
        pacing: Pacing,
        effects: Effects | None = None,
        *,
        lease_s: float = DEFAULT_LEASE_S,
        tracing: Tracing | None = None,
        members: Callable[[], list[tuple[str, str | None]]] | None = None,
    ) -> None:
        self._completions = completions  # the result writer's (in tests, a lock session's)
        # The live members an each-node slot is fanned out to (NodeState.members).
        self._members = members
        self._lease_s = lease_s
        # The `allow` claims queued for hand-over, by lease: whom to tell how it went.
        self._spawns: dict[tuple[UUID, int], Spawned] = {}
        self._effects = effects
        self._tracing = tracing  # with --otel: a fenced write gets a span
        # Runs being completed inside their handler's transaction, by the task doing it.
        self._commits: dict[asyncio.Task[None], ClaimedJob] = {}
        self._wake = wake
        self._clock = clock
        self._stats = stats
        self._pacing = pacing
        self._queue: list[Entry] = []
        self._queued_at = 0.0  # monotonic time the oldest queued completion arrived
        self._ready = Signal()
        self._full = Signal()
        self._failures = Failures("completion writes")

    @property
    def pending(self) -> int:
        return len(self._queue)

    def reject(self, job: ClaimedJob, exc: Exception) -> None:
        """A claimed job whose stored definition cannot be planned: fail the slot."""
        logger.error("cannot plan the job: %s", exc, extra=job_extra(job, "job_invalid"))
        self._stats.outcomes["failed"] += 1
        self.submit(job, broken(job, exc, self._clock.now()), [])

    def run_done(self, job: ClaimedJob, outcome: Outcome) -> None:
        assertion = None
        if job.asserts is not None:
            outcome, assertion = checked(job, outcome)
        try:
            done, skips = after_run(job, outcome, self._clock.now())
        except PulseError as exc:
            self.reject(job, exc)
            return
        if assertion is not None:
            done = done._replace(assertion=assertion)
        self._stats.outcomes[outcome.status] += 1
        if done.next_attempt > job.attempt:
            self._stats.retries += 1
        # Successes are the bulk of the log volume: DEBUG; anything else is worth a look.
        level = logging.DEBUG if outcome.status == RunStatus.SUCCEEDED else logging.WARNING
        if logger.isEnabledFor(level):
            logger.log(
                level,
                "run %s in %.3fs%s",
                outcome.status,
                outcome.duration_s,
                f": {outcome.error}" if outcome.error else "",
                extra=job_extra(job, "run_finished"),
            )
        pending = (
            None if self._effects is None else self._effects.take(job.id, job.slot, job.lease_token)
        )
        if pending is not None:
            task = asyncio.create_task(self._commit(job, outcome, done, skips, pending))
            self._commits[task] = job
            task.add_done_callback(self._commit_done)
            return
        self.submit(job, done, skips)

    def _commit_done(self, task: asyncio.Task[None]) -> None:
        self._commits.pop(task, None)

    def leases(self) -> set[tuple[UUID, int]]:
        """The job leases (id, token) of the runs that ended and whose completions are not
        written yet, and of the `allow` claims not handed to flights yet: their rows still
        run under this node."""
        ended = [job for job, _, _ in self._queue] + list(self._commits.values())
        return {(job.id, job.lease_token) for job in ended if not job.flight}

    def flight_leases(self) -> set[tuple[UUID, datetime, int]]:
        """The flight leases (id, slot, token) of the flights that ended and whose
        completions are not written yet, and of those the queued `allow` claims may have
        created already (a flight's first token is its claim's)."""
        ended = [job for job, _, _ in self._queue] + list(self._commits.values())
        flights = {(job.id, job.slot, job.lease_token) for job in ended if job.flight}
        spawns = {(d.id, d.slot, d.token) for _, d, _ in self._queue if d.outcome == SPAWNED}
        return flights | spawns

    async def _commit(
        self, job: ClaimedJob, outcome: Outcome, done: Completion, skips: list[Skip], tx: Pending
    ) -> None:
        """Complete a run that holds a handler transaction: inside it when the run
        succeeded, else after rolling it back."""
        assert self._effects is not None
        store = self._effects.store
        if outcome.status != RunStatus.SUCCEEDED:
            await tx.rollback()
            self.submit(job, done, skips)
            return
        try:
            if tx.conn is not None:
                applied = await asyncio.shield(store.commit(tx.conn, done, skips, job.flight))
            else:
                assert tx.sync_conn is not None
                commit = asyncio.to_thread(store.commit_sync, tx.sync_conn, done, skips, job.flight)
                applied = await asyncio.shield(commit)
        except StoreError as exc:
            # Nothing committed; or the commit broke after the completion applied, and this
            # write of the failure is fenced. Either way the effects exist at most once.
            self._stats.db_errors += 1
            logger.warning(
                "the run's transaction did not commit: %s", exc, extra=job_extra(job, "tx_failed")
            )
            failed = outcome._replace(status="failed", error=f"transaction not committed: {exc}")
            self._stats.outcomes["succeeded"] -= 1
            self.run_done(job, failed)
            return
        self._account([(job, done, skips)], lambda _: applied)
        if applied:
            self._pacing.due_at(done.next_run_at)
            if done.next_run_at <= self._clock.now():
                self._wake.set()

    def spawn(self, job: ClaimedJob, then: Spawned) -> None:
        """Hand the claimed slot of an overlap `allow` job to a flight and move the job on
        to its next slot; once that is written, ``then`` gets the flight to run (or None)."""
        try:
            done, skips = after_run(job, Outcome("succeeded", None, 0.0), self._clock.now())
        except PulseError as exc:
            then(None)
            self.reject(job, exc)
            return
        self._spawns[(job.id, job.lease_token)] = then
        self.submit(job, done._replace(outcome=SPAWNED), skips)

    def submit(self, job: ClaimedJob, done: Completion, skips: list[Skip]) -> None:
        if not self._queue:
            self._queued_at = time.monotonic()
        self._queue.append((job, done, skips))
        self._ready.set()
        if len(self._queue) >= MAX_BATCH:
            self._full.set()

    async def _wait_for_more(self, stop: asyncio.Event) -> None:
        if stop.is_set() or len(self._queue) >= MAX_BATCH or not self._pacing.more_coming:
            return
        caught_up = self._pacing.caught_up
        self._full.clear()
        caught_up.clear()
        wait_s = self._queued_at + MAX_DEFER_S - time.monotonic()
        await wait_any(wait_s, self._full, caught_up, stop)

    async def run(self, stop: asyncio.Event) -> None:
        """Write until ``stop`` is set and the queue is empty."""
        while True:
            if not self._queue:
                if stop.is_set():
                    if not self._commits:
                        return
                    await asyncio.gather(*self._commits, return_exceptions=True)
                    continue
                # Woken by a submit or by stop, never by a timer: an idle node's beats are
                # all the wake-ups it has, and this loop has nothing to do on them.
                await wait_any(IDLE_WAIT_S, self._ready, stop)
                self._ready.clear()
                continue
            await self._wait_for_more(stop)
            if not await asyncio.shield(self.flush_once()):
                # Keep trying after stop too: the node's drain deadline decides when to give up.
                await asyncio.sleep(self._failures.backoff_s(0.2, 5.0))

    async def flush_once(self) -> bool:
        """Write what is queued: completions of job claims, of flights, and the hand-over
        of `allow` claims to flights, one statement each; False if the database failed
        (what was written by then is off the queue)."""
        batch = self._queue[:MAX_BATCH]
        if not batch:
            return True
        kinds = (
            [e for e in batch if not e[0].flight and e[1].outcome != SPAWNED],
            [e for e in batch if e[0].flight],
            [e for e in batch if e[1].outcome == SPAWNED],
        )
        writes = (self._complete, self._complete_flights, self._spawn)
        for entries, write in zip(kinds, writes, strict=True):
            if not entries:
                continue
            try:
                await write(entries)
            except StoreError as exc:
                self._stats.db_errors += 1
                self._failures.failed(exc)
                return False
            written = {id(e) for e in entries}
            self._queue = [e for e in self._queue if id(e) not in written]
        self._failures.succeeded()
        self._queued_at = time.monotonic()  # what is left waits from now
        now = self._clock.now()
        if any(done.next_run_at <= now for _, done, _ in batch):
            self._wake.set()  # a slot is due again already (catch-up, retry, release)
        return True

    async def _complete(self, entries: list[Entry]) -> None:
        skips = [s for _, _, ss in entries for s in ss]
        applied = await self._completions.complete([done for _, done, _ in entries], skips)
        self._account(entries, lambda job: job.id in applied)
        upcoming = [done.next_run_at for job, done, _ in entries if job.id in applied]
        if upcoming:
            self._pacing.due_at(min(upcoming))

    async def _complete_flights(self, entries: list[Entry]) -> None:
        applied = await self._completions.complete_flights([done for _, done, _ in entries])
        self._account(entries, lambda job: (job.id, job.slot) in applied)

    async def _spawn(self, entries: list[Entry]) -> None:
        skips = [s for _, _, ss in entries for s in ss]
        members = self._members() if self._members is not None else []
        moved = await self._completions.spawn(
            [d for _, d, _ in entries], skips, self._lease_s, members=members
        )
        self._account(entries, lambda job: job.id in moved)
        for job, _, _ in entries:
            then = self._spawns.pop((job.id, job.lease_token))
            if moved.get(job.id):
                then(job._replace(flight=True))
            else:  # fenced, or the job is at its limit: due again in a second
                then(None)
        upcoming = [done.next_run_at for job, done, _ in entries if moved.get(job.id)]
        if upcoming:
            self._pacing.due_at(min(upcoming))

    def _account(self, entries: list[Entry], applied: Callable[[ClaimedJob], bool]) -> None:
        for job, done, skips in entries:
            if applied(job):
                self._stats.skipped_slots += len(skips) + (done.outcome == RunStatus.SKIPPED)
                continue
            self._stats.fenced_writes += 1
            if self._tracing is not None:
                self._tracing.fenced(job)
            logger.warning(
                "stale %s write rejected: the lease (token %d) was lost",
                done.outcome,
                job.lease_token,
                extra=job_extra(job, "fenced_write"),
            )


def job_extra(job: ClaimedJob, event: str) -> dict[str, object]:
    """The log fields that name a run."""
    return {
        "event": event,
        "job": job.name,
        "tenant": job.tenant,
        "slot": job.slot.isoformat(),
        "attempt": job.attempt,
    }
