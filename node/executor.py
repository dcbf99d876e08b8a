"""The executor: runs claimed slots, never more than ``concurrency`` at once.

The claim loop asks ``free`` before claiming, so claimed work always has a slot (B1): there
is no internal queue to grow. Each run is an asyncio task: a run claimed ahead of its due
time holds its slot and starts when it falls due; the handler runs through
``node.handlers.invoke`` (sync ones on ``node.threads``) and its outcome goes to
``on_done``. A run whose lease was lost, or that is still running when the drain ends, is
cancelled and reported to nobody (its completion would be fenced anyway); its slot frees
at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from uuid import UUID

from cluster.store.records import ClaimedJob
from node.handlers import Outcome, RunContext, invoke
from node.service import Signal
from node.threads import HandlerThreads

logger = logging.getLogger(__name__)


@dataclass(eq=False)
class Running:
    job: ClaimedJob
    task: asyncio.Task[None] = field(init=False)


class Executor:
    def __init__(
        self,
        concurrency: int,
        node_id: str,
        zone: str,
        on_done: Callable[[ClaimedJob, Outcome], None],
    ) -> None:
        self.concurrency = concurrency
        self.node_id = node_id
        self.zone = zone
        self._on_done = on_done
        self.running: dict[UUID, Running] = {}
        self.slot_freed = Signal()
        self.idle = Signal()
        self.idle.set()
        self.threads = HandlerThreads(concurrency)

    @property
    def free(self) -> int:
        return self.concurrency - len(self.running)

    def leases(self) -> list[tuple[UUID, int]]:
        return [(r.job.id, r.job.lease_token) for r in self.running.values()]

    def submit(self, job: ClaimedJob, start_in_s: float = 0.0) -> None:
        """Run ``job`` now, or in ``start_in_s`` (claimed ahead of its due time: it holds
        its slot meanwhile)."""
        stale = self.running.get(job.id)
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
        found = self.running[job.id] = Running(job)
        found.task = asyncio.create_task(
            self._run(found, start_in_s), name=f"run:{job.tenant}/{job.name}"
        )

    def context(self, job: ClaimedJob) -> RunContext:
        return RunContext(
            job_id=job.id,
            job_name=job.name,
            tenant_id=job.tenant,
            payload={} if job.payload is None else job.payload,
            scheduled_for=job.slot,
            attempt=job.attempt,
            timeout_s=job.timeout_s,
            node_id=self.node_id,
            zone=self.zone,
        )

    async def _run(self, found: Running, start_in_s: float) -> None:
        job = found.job
        if start_in_s > 0:
            await asyncio.sleep(start_in_s)
        outcome = await invoke(job.handler, self.context(job), job.timeout_s, self.threads)
        if self.running.get(job.id) is found:  # else dropped: reported to nobody
            self._finish(found)
            self._on_done(job, outcome)

    def _finish(self, found: Running) -> None:
        key = found.job.id
        if self.running.get(key) is not found:
            return  # already dropped (a later claim of the same job may hold the id now)
        del self.running[key]
        self.slot_freed.set()
        if not self.running:
            self.idle.set()

    def cancel(self, job_id: UUID, lease_token: int) -> ClaimedJob | None:
        """Stop caring about the run of that lease (it is lost)."""
        found = self.running.get(job_id)
        if found is None or found.job.lease_token != lease_token:
            return None
        self._drop(found)
        return found.job

    def _drop(self, found: Running) -> None:
        """Free the run's slot now and cancel it; a sync handler's thread is left to finish
        on its own (``node.threads``)."""
        found.task.cancel()
        self._finish(found)

    async def drain(self, timeout_s: float) -> list[ClaimedJob]:
        """Wait for in-flight runs; cancel and return those still running at the deadline."""
        if self.running:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(timeout_s):
                    await self.idle.wait()
        left = list(self.running.values())
        for found in left:
            self._drop(found)
        await asyncio.gather(*(found.task for found in left), return_exceptions=True)
        return [found.job for found in left]

    def shutdown(self) -> None:
        self.threads.shutdown()
