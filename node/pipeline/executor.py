"""The executor: runs claimed slots, never more than ``concurrency`` at once.

The claim loop asks ``free`` before claiming, so claimed work always has a slot (B1): there
is no internal queue to grow. A run claimed ahead of its due time holds its slot and
starts when it falls due. Sync handlers run on the node's handler threads
(``node.handlers.threads``); one timer, set for the earliest deadline, times them out. Async and
``shell:`` handlers run as asyncio tasks. Each finished run is handed to ``on_done``; a run
whose lease was lost is cancelled and reported to nobody (its completion would be fenced
anyway). A run asked to stop (``stop``: ``pulse runs cancel``) is cancelled and reported
``cancelled``; one that does not end within the job's cancel grace is abandoned and
reported so. Overlap ``replace`` does not wait: when the job's next slot falls due the run
is told to stop, reported ``cancelled`` at once and left to wind down (``replace``), so
the next slot starts whatever the handler does. Guarded by tests/unit/test_executor.py and
tests/unit/test_cancel.py.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import math
import time
from collections.abc import Awaitable, Callable
from datetime import datetime
from typing import TYPE_CHECKING, Any
from uuid import UUID

from cluster.jobs.models import RunStatus
from cluster.store.lock.records import ClaimedJob
from node.handlers.context import Outcome, RunCancelled, RunContext, cancelled, finished, timed_out
from node.handlers.forwarding import Forwarders
from node.handlers.invoke import invoke
from node.handlers.python import awaited, sync_handler
from node.handlers.threads import HandlerThreads, ThreadRun
from node.pipeline.runcontext import RunKey, Running, key_of, run_context
from node.service import Signal

if TYPE_CHECKING:
    from node.handlers.effects import Effects
    from node.handlers.traces import Tracing

logger = logging.getLogger(__name__)


class Executor:
    def __init__(
        self,
        concurrency: int,
        node_id: str,
        zone: str,
        on_done: Callable[[ClaimedJob, Outcome], None],
        effects: Effects | None = None,
        forwarders: Forwarders | None = None,
        tracing: Tracing | None = None,
    ) -> None:
        self.concurrency = concurrency
        # With --otel, every attempt's span opens at its start and closes with its outcome.
        self.tracing = tracing
        if tracing is not None:
            on_done = self._traced(tracing, on_done)
        self.forwarders = forwarders or Forwarders()
        self.node_id = node_id
        self.zone = zone
        self._on_done = on_done
        self._effects = effects
        self.running: dict[RunKey, Running] = {}
        self.reserved = 0  # slots held for `allow` claims being handed to flights
        self.slot_freed = Signal()
        self.idle = Signal()
        self.idle.set()
        # Tasks of replaced runs still winding down (a shell's grace): held so they finish.
        self._winding_down: set[asyncio.Task[None]] = set()
        self._loop = asyncio.get_running_loop()
        self.threads = HandlerThreads(concurrency, self._thread_results)
        self._timer: asyncio.TimerHandle | None = None
        self._timer_at = math.inf

    @staticmethod
    def _traced(
        tracing: Tracing, on_done: Callable[[ClaimedJob, Outcome], None]
    ) -> Callable[[ClaimedJob, Outcome], None]:
        def done(job: ClaimedJob, outcome: Outcome) -> None:
            tracing.end(job, outcome.status, outcome.error)
            on_done(job, outcome)

        return done

    @property
    def free(self) -> int:
        return self.concurrency - len(self.running) - self.reserved

    def leases(self) -> list[tuple[UUID, int]]:
        return [(r.job.id, r.job.lease_token) for r in self.running.values() if not r.job.flight]

    def flight_leases(self) -> list[tuple[UUID, datetime, int]]:
        return [
            (r.job.id, r.job.slot, r.job.lease_token) for r in self.running.values() if r.job.flight
        ]

    def reserve(self) -> None:
        """Hold a slot for an `allow` claim until its flight starts (``submit(reserved=True)``)
        or it gets none (``unreserve``), so the claim loop never takes more than fits; a
        drain waits for it as for a run."""
        self.reserved += 1
        self.idle.clear()

    def unreserve(self) -> None:
        self.reserved -= 1
        self.slot_freed.set()
        if not self.running and not self.reserved:
            self.idle.set()

    def submit(
        self,
        job: ClaimedJob,
        start_in_s: float = 0.0,
        replace_in_s: float | None = None,
        *,
        reserved: bool = False,
    ) -> None:
        """Run ``job`` now, or in ``start_in_s`` (claimed ahead of its due time: it holds
        its slot meanwhile). With ``replace_in_s`` (overlap ``replace``: when the job's next
        slot falls due) a run still going then is stopped to make way for it."""
        if reserved:
            self.reserved -= 1
        stale = self.running.get(key_of(job))
        if stale is not None:
            # Claimed again, so the lease of this earlier run is gone (a claim takes only
            # idle rows): its result would be fenced. Stop caring about it now rather
            # than when lease renewal notices.
            logger.warning(
                "a run of an earlier lease (token %d) was still in flight; abandoned",
                stale.job.lease_token,
                extra={"event": "stale_run_abandoned", "job": job.name, "tenant": job.tenant},
            )
            self._drop(stale)
        if self.free <= 0:
            raise RuntimeError(f"executor cannot take {job.name}: no free slot")
        self.idle.clear()
        found = self.running[key_of(job)] = Running(job, self._loop.time() + max(0.0, start_in_s))
        if job.cancel_by is not None:  # asked to stop before this attempt began
            self._finish(found)
            self._on_done(job, Outcome("cancelled", f"cancelled by {job.cancel_by}", 0.0))
            return
        if replace_in_s is not None:
            found.timers = [
                self._loop.call_later(max(0.0, replace_in_s), self.replace, job.id, job.lease_token)
            ]
        if start_in_s > 0:
            found.due = time.time() + start_in_s
            self._loop.call_at(found.started, self._start_if_current, found)
        else:
            self._start(found)

    def _start_if_current(self, found: Running) -> None:
        # Dropped meanwhile (lease lost, drained): not in ``running`` any more.
        if self.running.get(key_of(found.job)) is not found:
            return
        # The wait is on the monotonic clock; when the host's wall clock (the database's
        # too, on one host) stepped back meanwhile, the slot is not due yet: wait again.
        behind = found.due - time.time()
        if behind > 0.001:
            found.started = self._loop.time() + behind
            self._loop.call_at(found.started, self._start_if_current, found)
            return
        self._start(found)

    def _start(self, found: Running) -> None:
        job = found.job
        found.started = now = self._loop.time()
        fn = sync_handler(job.handler)
        found.ctx = self.context(job)
        if fn is None:  # async, shell:, or not resolvable: invoke() deals with each
            found.task = asyncio.create_task(self._run(found), name=f"run:{job.tenant}/{job.name}")
        else:
            found.thread = ThreadRun(fn, found.ctx, key_of(job))
            self.threads.submit(found.thread)
            if now + job.timeout_s < self._timer_at:
                self._arm(now + job.timeout_s)

    def context(self, job: ClaimedJob) -> RunContext:
        traceparent = None if self.tracing is None else self.tracing.start(job)
        return run_context(job, self.node_id, self.zone, self._effects, traceparent)

    async def _run(self, found: Running) -> None:
        job = found.job
        assert found.ctx is not None
        run = invoke(job.handler, found.ctx, job.timeout_s, self.threads, self.forwarders.run)
        await self._report(found, run)

    async def _report(self, found: Running, outcome: Awaitable[Outcome]) -> None:
        try:
            done = await outcome
        except asyncio.CancelledError:
            task = asyncio.current_task()
            if found.cancelled_by is None or found.ctx is None or task is None:
                self._finish(found)
                raise
            task.uncancel()  # stopped as asked: reported as cancelled
            done = cancelled(found.ctx, found.cancelled_by, self._loop.time() - found.started)
        if self.running.get(key_of(found.job)) is found:  # else dropped: reported to nobody
            self._finish(found)
            self._on_done(found.job, self._as_asked(found, done))

    @staticmethod
    def _as_asked(found: Running, outcome: Outcome) -> Outcome:
        """A run asked to stop that ended in an error or as cancelled is ``cancelled``,
        with who asked; one that finished its work first keeps its outcome."""
        if found.cancelled_by is None or outcome.status == RunStatus.SUCCEEDED:
            return outcome
        return outcome._replace(status="cancelled", error=f"cancelled by {found.cancelled_by}")

    def stop(self, job_id: UUID, lease_token: int, by: str, slot: datetime | None = None) -> bool:
        """Ask the run of that lease to stop (False: no such run here). A task is cancelled
        (a shell's process group gets SIGTERM, then SIGKILL after the grace), a thread sees
        ``ctx.cancelled``; a run still going after the job's cancel grace is abandoned."""
        found = self.running.get((job_id, slot))
        if found is None or found.job.lease_token != lease_token:
            return False
        if found.cancelled_by is not None:
            return True  # already stopping
        found.cancelled_by = by
        logger.info(
            "run cancelled by %s",
            by,
            extra={"event": "run_cancelled", "job": found.job.name, "tenant": found.job.tenant},
        )
        if found.ctx is None:  # claimed ahead, not started: nothing to stop
            self._finish(found)
            self._on_done(found.job, Outcome("cancelled", f"cancelled by {by}", 0.0))
            return True
        found.ctx.cancelled.set()
        if found.task is not None:
            found.task.cancel()
        grace = self._loop.call_later(found.job.cancel_grace_s + 1.0, self._abandon, found)
        found.timers = [*(found.timers or []), grace]
        return True

    def replace(self, job_id: UUID, lease_token: int) -> bool:
        """Overlap ``replace``: the job's next slot is due. The run of that lease is told
        to stop as by ``stop`` and reported ``cancelled`` now, so its lease goes back and the
        next slot starts at once; whatever it still does (a shell within its grace, a sync
        handler that ignores ``ctx.cancelled``) is reported to nobody. False: no such run."""
        found = self.running.get((job_id, None))
        if found is None or found.job.lease_token != lease_token:
            return False
        job = found.job
        by = f"overlap replace: the slot after {job.slot.isoformat()} is due"
        found.cancelled_by = by
        logger.info(
            "run replaced by the next slot",
            extra={"event": "run_replaced", "job": job.name, "tenant": job.tenant},
        )
        if found.ctx is None:  # claimed ahead, not started: nothing to stop
            self._finish(found)
            self._on_done(job, Outcome("cancelled", f"cancelled by {by}", 0.0))
            return True
        found.ctx.cancelled.set()
        if found.task is not None:
            self._winding_down.add(found.task)
            found.task.add_done_callback(self._winding_down.discard)
        duration = self._loop.time() - found.started
        self._drop(found, "cancelled")
        self._on_done(job, cancelled(found.ctx, by, duration))
        return True

    def _abandon(self, found: Running) -> None:
        """A cancelled run still going after its grace: reported cancelled, left behind."""
        if self.running.get(key_of(found.job)) is not found or found.ctx is None:
            return
        by = found.cancelled_by or "?"
        duration = self._loop.time() - found.started
        note = f"; it did not stop within {found.job.cancel_grace_s:g}s and was abandoned"
        self._drop(found, "cancelled")
        self._on_done(found.job, cancelled(found.ctx, by, duration, note))

    def _thread_results(self, batch: list[ThreadRun]) -> None:
        for run in batch:
            found = self.running.get(run.key)
            if found is None or found.thread is not run:
                continue
            if run.result is not None and inspect.isawaitable(run.result):
                # A sync function that returned an awaitable: await it on the loop, within
                # what is left of the timeout.
                left = found.deadline - self._loop.time()
                pending = awaited(run.arg, run.result, left, run.started)
                found.thread = None
                found.task = asyncio.create_task(self._report(found, pending))
                continue
            self._finish(found)
            outcome = finished(run.arg, run.error, run.duration_s, run.result)
            if isinstance(run.error, RunCancelled) and found.cancelled_by is None:
                found.cancelled_by = "the handler"  # it raised RunCancelled by itself
            self._on_done(found.job, self._as_asked(found, outcome))

    def _arm(self, at: float) -> None:
        if self._timer is not None:
            self._timer.cancel()
        self._timer = self._loop.call_at(at, self._time_out)
        self._timer_at = at

    def _time_out(self) -> None:
        """Report every thread run past its deadline as timed out; re-arm for the next."""
        self._timer, self._timer_at = None, math.inf
        now = self._loop.time()
        following = math.inf
        for found in list(self.running.values()):
            if found.thread is None:
                continue
            if found.deadline > now:
                following = min(following, found.deadline)
                continue
            self.threads.abandon(found.thread)
            self._finish(found)
            outcome = timed_out(found.thread.arg, found.job.timeout_s, now - found.started)
            self._on_done(found.job, outcome)
        if following < math.inf:
            self._arm(following)

    def _finish(self, found: Running) -> None:
        key = key_of(found.job)
        if found.ctx is not None:  # its transaction, if any, waits for no one after this
            object.__setattr__(found.ctx, "_reported", True)
        if self.running.get(key) is not found:
            return  # already dropped (a later claim of the same job may hold the id now)
        del self.running[key]
        for timer in found.timers or ():
            timer.cancel()
        self.slot_freed.set()
        if not self.running and not self.reserved:
            self.idle.set()

    def cancel(
        self, job_id: UUID, lease_token: int, slot: datetime | None = None
    ) -> ClaimedJob | None:
        """Stop caring about the run of that lease (it is lost): a task is cancelled; a
        thread cannot be, so its result is dropped when it comes."""
        found = self.running.get((job_id, slot))
        if found is None or found.job.lease_token != lease_token:
            return None
        if found.task is not None:
            found.task.cancel()
        else:
            self._drop(found)
        return found.job

    def _drop(self, found: Running, status: str = "abandoned") -> None:
        """Free the run's slot now; whatever it still does is reported to nobody."""
        if found.thread is not None:
            self.threads.abandon(found.thread)
        if found.task is not None:
            found.task.cancel()
        if self.tracing is not None:
            self.tracing.end(found.job, status)
        self._finish(found)

    async def drain(self, timeout_s: float) -> list[ClaimedJob]:
        """Wait for in-flight runs; cancel and return those still running at the deadline.
        Replaced runs winding down (a shell's group within its grace) are waited for too,
        so no process group outlives the node."""
        if self.running or self._winding_down:
            try:
                async with asyncio.timeout(timeout_s):
                    await self.idle.wait()
                    if self._winding_down:
                        await asyncio.wait(set(self._winding_down))
            except TimeoutError:
                pass
        left = [r.job for r in self.running.values()]
        tasks: list[asyncio.Task[Any]] = []
        for found in list(self.running.values()):
            if found.task is not None:
                found.task.cancel()
                tasks.append(found.task)
            else:
                self._drop(found)
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)
        return left

    def shutdown(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
        self.threads.shutdown()
