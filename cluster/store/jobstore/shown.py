"""What ``pulse jobs show`` (and the API's job page) reads of one job: its row, its next
slots with their starts, entries and calendar skips (``walked_schedule``: a slot kept
under a new timing goes on to the new timing's slots after the change), its latest runs,
its edges and what its slot waits for, a named limit's wait; and ``--explain``, each slot's
fate beside what was recorded for it. A part of ``JobStore``, on its scoped connection."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any
from uuid import UUID

from cluster.jobs.fields import DEFAULT_TENANT
from cluster.jobs.models import Job, JobStatus, Run, iso
from cluster.store.jobstore.named_limits import NamedLimits
from cluster.store.jobstore.scoped import ScopedConnection
from cluster.store.jobstore.timeline import Record, calendar_timeline, explain_job
from cluster.timing.jitter import jittered
from cluster.timing.schedule import CHAINED_NEXT, ENDED, Schedule
from cluster.timing.timeline import Step


class Shown:
    def __init__(self, db: ScopedConnection, limits: NamedLimits) -> None:
        self._db = db
        self._limits = limits

    async def details(
        self,
        name: str,
        tenant: str = DEFAULT_TENANT,
        *,
        slots: int = 5,
        runs: int = 5,
        now: datetime | None = None,
    ) -> dict[str, Any]:
        """What ``pulse jobs show --json`` prints: the job, its next slots, its latest runs."""
        job = await self._db.job("get_job", name, tenant)
        now = await self._db.db_now(now)
        schedule = job.walked_schedule()  # a slot kept under a new timing: its slots after it
        if job.status == JobStatus.IDLE and job.next_run_at is not None:  # its slot, then the next
            upcoming = [job.slot_at, *schedule.next_n(job.slot_at, slots - 1)]
            starts = [job.next_run_at]  # the slot's start, or a retry's
        elif job.status == JobStatus.DONE:
            upcoming, starts = [], []
        else:
            upcoming, starts = schedule.next_n(now, slots), []
        # Schedules that all end, or a chained job waiting for a release: no more.
        upcoming = [s for s in upcoming if s < min(ENDED, CHAINED_NEXT)]
        starts += [jittered(job.tenant, job.name, s, job.jitter_s) for s in upcoming[len(starts) :]]
        starts = starts[: len(upcoming)]
        params = {"job_name": job.name, "tenant_id": job.tenant, "status": None, "limit": runs}
        recent = [Run.from_row(r) for r in await self._db.all("list_runs", params)]
        data = job.to_json()
        data["next_slots"] = [iso(s) for s in upcoming]
        data["next_starts"] = [iso(s) for s in starts]
        data["next_reasons"], data["calendar_skips"] = [None] * len(upcoming), []
        rule = job.rule()
        if rule is not None and job.status != JobStatus.DONE:
            data.update(calendar_timeline(job, rule, now, slots))
        shown = [datetime.fromisoformat(s) for s in data["next_slots"]]
        data["next_entries"] = schedule_entries(schedule, shown)
        data["recent_runs"] = [r.to_json() for r in recent]
        data.update(await self._links(job.id))
        if job.slot_at >= CHAINED_NEXT and data.get("waits_for"):  # no slot released yet
            data["waits_for"] = f"the next success of {', '.join(data['upstreams'])}"
        if job.uses:  # a slot passed over for a named limit with no room (docs/limits.md)
            waiting = await self._limits.waiting(job.id)
            data["key_wait"] = None if waiting is None else waiting.to_json()
        return data

    async def explain(
        self,
        name: str,
        tenant: str = DEFAULT_TENANT,
        *,
        after: datetime | None = None,
        count: int = 10,
        now: datetime | None = None,
    ) -> tuple[Job, list[Step]]:
        """``pulse jobs show --explain``: the job and its slots' fates from ``after`` (default:
        now), each past slot beside what was recorded for it (``explain_job``)."""
        job = await self._db.job("get_job", name, tenant)
        db_now = await self._db.db_now(now)
        steps = explain_job(job, db_now, count, after=after)
        if not steps:
            return job, steps
        params = {"job_id": job.id, "from": steps[0].slot, "to": steps[-1].slot, "limit": 10_000}
        rows = await self._db.all("recorded_between", params)
        recorded = {r["scheduled_for"]: Record(r["status"], r["last_error"]) for r in rows}
        return job, explain_job(job, db_now, count, after=after, recorded=recorded)

    async def _links(self, job_id: UUID) -> dict[str, Any]:
        """Upstreams and downstreams (docs/design/gates.md) and what the slot waits for."""
        links = await self._db.all("gate_neighbours", {"id": job_id})
        ups = [r["name"] for r in links if r["side"] == "up"]
        found: dict[str, Any] = {
            "upstreams": ups,
            "downstreams": [r["name"] for r in links if r["side"] == "down"],
        }
        if ups:
            gate = await self._db.one("gate_waits_for", {"id": job_id})
            assert gate is not None
            verdict = gate["verdict"]
            found["after_match"] = links[0]["match"]
            found["after_timeout_s"] = gate["after_timeout_s"]
            found["after_failure"] = gate["after_failure"]
            found["waits_for"] = None if verdict is None else verdict.split(": ", 1)[1]
            found["waits_until"] = iso(gate["waits_until"])
        return found


def schedule_entries(schedule: Schedule, slots: Sequence[datetime]) -> list[int | None] | None:
    """The 1-based schedule entry of each slot, for a job with several schedules; else None."""
    if not schedule.entries:
        return None
    found = (schedule.entry_at(slot) for slot in slots)
    return [None if index is None else index + 1 for index in found]
