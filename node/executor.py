"""The executor: runs claimed slots as asyncio tasks, never more than ``concurrency``.

The claim loop asks ``free`` before claiming, so claimed work always has a slot (B1): there
is no internal queue to grow. Sync handlers run on a thread pool sized to the concurrency.
Each finished run is handed to ``on_done``; a run whose lease was lost is cancelled and
reported to nobody (its completion would be fenced anyway).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import timedelta
from uuid import UUID

from cluster.session import ClaimedJob
from node.handlers import Outcome, RunContext, invoke

logger = logging.getLogger(__name__)


@dataclass
class Running:
    job: ClaimedJob
    task: asyncio.Task[None]
    started: float = field(default_factory=time.monotonic)


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
        self.slot_freed = asyncio.Event()
        self.idle = asyncio.Event()
        self.idle.set()
        self._threads = ThreadPoolExecutor(concurrency, thread_name_prefix="pulse-handler")
        asyncio.get_running_loop().set_default_executor(self._threads)

    @property
    def free(self) -> int:
        return self.concurrency - len(self.running)

    def leases(self) -> list[tuple[UUID, int]]:
        return [(r.job.id, r.job.lease_token) for r in self.running.values()]

    def submit(self, job: ClaimedJob) -> None:
        if job.id in self.running or self.free <= 0:
            raise RuntimeError(f"executor cannot take {job.name}: slot in use or no free slot")
        task = asyncio.create_task(self._run(job), name=f"run:{job.tenant}/{job.name}")
        self.running[job.id] = Running(job, task)
        self.idle.clear()

    def context(self, job: ClaimedJob) -> RunContext:
        return RunContext(
            job_id=job.id,
            job_name=job.name,
            tenant_id=job.tenant,
            payload=job.payload,
            scheduled_for=job.slot,
            attempt=job.attempt,
            idempotency_key=f"{job.id}:{job.slot.isoformat()}",
            deadline=job.slot + timedelta(seconds=job.timeout_s),
            node_id=self.node_id,
            zone=self.zone,
        )

    async def _run(self, job: ClaimedJob) -> None:
        try:
            outcome = await invoke(job.handler, self.context(job), job.timeout_s)
        except asyncio.CancelledError:
            self._finish(job.id)
            raise
        self._finish(job.id)
        self._on_done(job, outcome)

    def _finish(self, job_id: UUID) -> None:
        self.running.pop(job_id, None)
        self.slot_freed.set()
        if not self.running:
            self.idle.set()

    def cancel(self, job_id: UUID) -> ClaimedJob | None:
        found = self.running.get(job_id)
        if found is None:
            return None
        found.task.cancel()
        return found.job

    async def drain(self, timeout_s: float) -> list[ClaimedJob]:
        """Wait for in-flight runs; cancel and return those still running at the deadline."""
        if self.running:
            try:
                async with asyncio.timeout(timeout_s):
                    await self.idle.wait()
            except TimeoutError:
                pass
        left = [r.job for r in self.running.values()]
        tasks = [r.task for r in self.running.values()]
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)
        return left

    def shutdown(self) -> None:
        self._threads.shutdown(wait=False, cancel_futures=True)
