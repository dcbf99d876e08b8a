"""Which schedule a claimed slot of a job with several schedules comes from, and the
payload it runs with (the job's, with that entry's keys over it).

Asked once per run, only for jobs whose schedule is ``@schedules [...]``: a job with one
schedule pays a string prefix test (docs/design/schedules.md).
"""

from __future__ import annotations

from typing import Any

from cluster.store.lock.records import ClaimedJob
from cluster.timing.entries import is_union
from node.pipeline.outcomes import schedule_of

__all__ = ["slot_entry"]


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
