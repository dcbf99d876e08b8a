"""A claimed job to hand an executor, the outcomes it reports, and executors that the
``executors`` fixture (tests/unit/conftest.py) shuts down after each test."""

from __future__ import annotations

import asyncio
import uuid
from datetime import UTC, datetime

from cluster.jobs.spec import OPTIONS
from cluster.store.lock.records import ClaimedJob
from node.handlers.context import Outcome
from node.pipeline.executor import Executor


def job(handler: str, name: str = "j", timeout_s: float = 30.0) -> ClaimedJob:
    """A claimed job of ``handler`` due at its slot, with its options' defaults."""
    slot = datetime(2026, 1, 1, tzinfo=UTC)
    defaults = {d.name: d.default for d in OPTIONS if d.option.claimed}
    return ClaimedJob(
        **{
            **defaults,
            "schedule": "@every 1m",
            "handler": handler,
            "timeout_s": timeout_s,
        },
        id=uuid.uuid4(),
        tenant="t",
        name=name,
        payload={},
        shard=0,
        slot=slot,
        attempt=1,
        lease_token=1,
        due=slot,
    )


class Outcomes:
    def __init__(self) -> None:
        self.got: dict[str, Outcome] = {}
        self.changed = asyncio.Event()

    def __call__(self, job: ClaimedJob, outcome: Outcome) -> None:
        assert job.name not in self.got, f"{job.name} reported twice"
        self.got[job.name] = outcome
        self.changed.set()

    async def wait_for(self, count: int) -> None:
        async with asyncio.timeout(20):
            while len(self.got) < count:
                self.changed.clear()
                await self.changed.wait()


# How long a test's executors may take to wind down at its end.
DRAIN_S = 2.0


class Executors:
    """Makes executors, each reporting to fresh ``Outcomes``, and shuts them all down."""

    def __init__(self) -> None:
        self.made: list[Executor] = []

    def __call__(self, concurrency: int, zone: str = "z") -> tuple[Executor, Outcomes]:
        done = Outcomes()
        self.made.append(Executor(concurrency, "n1", zone, done))
        return self.made[-1], done

    async def close(self) -> None:
        """Cancel what still runs and wait for it to end (a shell's process reaped while the
        test's event loop still runs, so no subprocess outlives it), then shut down."""
        for executor in self.made:
            await executor.drain(DRAIN_S)
            executor.shutdown()
