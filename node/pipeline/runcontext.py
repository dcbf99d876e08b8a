"""A run as the executor holds it, and the context its handler is given.

``Running`` is one run in flight (a job's claim, or a flight of an overlap ``allow`` job)
with its timers; ``run_context`` builds the ``RunContext`` a handler receives from the
claimed slot: the payload (with the keys of the schedule entry the slot comes from, for a
job with several schedules), its state, its previous slots and its trace parent.
``slot_entry`` is asked once per run, and only for jobs whose schedule is
``@schedules [...]``: a job with one schedule pays a string prefix test
(docs/design/schedules.md).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any
from uuid import UUID

from cluster.store.lock.records import ClaimedJob
from cluster.timing.entries import is_union
from node.handlers.context import RunContext
from node.handlers.threads import ThreadRun
from node.pipeline.outcomes import schedule_of

if TYPE_CHECKING:
    from node.handlers.effects import Effects

__all__ = ["RunKey", "Running", "key_of", "run_context", "slot_entry"]

# A run in flight: a job's claim (slot None), or a flight of an overlap `allow` job.
RunKey = tuple[UUID, datetime | None]


def key_of(job: ClaimedJob) -> RunKey:
    return (job.id, job.slot if job.flight else None)


@dataclass(eq=False)
class Running:
    job: ClaimedJob
    started: float  # loop time (for a run claimed ahead of its due time: when it starts)
    due: float = 0.0  # a run claimed ahead: when it falls due, in epoch seconds on this host
    task: asyncio.Task[None] | None = None
    thread: ThreadRun | None = None
    ctx: RunContext | None = None
    cancelled_by: str | None = None  # asked to stop, by whom
    timers: list[asyncio.TimerHandle] | None = None  # replace, cancel grace

    @property
    def deadline(self) -> float:
        return self.started + self.job.timeout_s


def run_context(
    job: ClaimedJob,
    node_id: str,
    zone: str,
    effects: Effects | None,
    traceparent: str | None,
) -> RunContext:
    """What the handler of ``job``'s claimed slot is told about its run."""
    payload, entry = slot_entry(job)
    return RunContext(
        job_id=job.id,
        job_name=job.name,
        tenant_id=job.tenant,
        payload=payload,
        scheduled_for=job.slot,
        attempt=job.attempt,
        timeout_s=job.timeout_s,
        node_id=node_id,
        zone=zone,
        output_limit=job.output_limit,
        fencing_token=job.lease_token,
        cancel_grace_s=job.cancel_grace_s,
        effects=effects,
        previous_slot=job.previous_slot,
        last_success_slot=job.last_success,
        state=dict(job.state or {}),
        traceparent=traceparent,
        schedule_entry=entry,
    )


def slot_entry(job: ClaimedJob) -> tuple[dict[str, Any], int | None]:
    """(payload, the entry's 1-based number) for the claimed slot; (payload, None) for a
    job with one schedule, or a slot no entry has (a triggered one)."""
    payload = {} if job.payload is None else job.payload
    if not is_union(job.schedule):
        return payload, None
    schedule = schedule_of(job)
    index = schedule.entry_at(job.slot)
    if index is None:
        return payload, None
    extra = schedule.entries[index].payload
    return ({**payload, **extra} if extra else payload), index + 1
