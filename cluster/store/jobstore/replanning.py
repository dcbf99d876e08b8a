"""Where an existing job starts when an apply gives it a new definition, and the records
that go with it: the skips its old calendar and windows recorded ahead taken back
(``withdraw_rule_skips``), its new slot moved past the records it keeps ahead (skip-next's),
a slot it owes kept for its claim to decide, and the skips its new rule records before that
slot. Split from ``Definitions``, which writes the rows; a part of ``JobStore``
(docs/design/calendars.md, docs/design/revisions.md).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from cluster.jobs.models import JobStatus
from cluster.jobs.spec import JobSpec
from cluster.store.connect import Row
from cluster.store.jobstore import bulk
from cluster.store.jobstore.calendar_rule import Rules
from cluster.store.jobstore.holds import open_run
from cluster.store.jobstore.scoped import ScopedConnection
from cluster.timing.calendared import CalendarRule, Decision, jittered_start
from cluster.timing.runs import current_run, first_run, origin_of, planned_from

__all__ = ["Pending", "Replanning", "owes"]

# The columns whose change changes what a job's calendar and windows skip.
_RULED = ("schedule", "tz", "dst_repeated", "dst_skipped", "calendar", "on_excluded",
          "business_day", "labels")  # fmt: skip


@dataclass
class Pending:
    """A spec planned and not yet written: its rule and its ``upsert_jobs`` parameters."""

    spec: JobSpec
    rule: CalendarRule | None
    params: dict[str, Any]

    @property
    def key(self) -> bulk.Key:
        return (self.spec.tenant, self.spec.name)


class Replanning:
    def __init__(self, db: ScopedConnection, rules: Rules) -> None:
        self._db = db
        self._rules = rules

    async def take_back(
        self, pending: Sequence[Pending], found: Mapping[bulk.Key, Row], db_now: datetime
    ) -> set[bulk.Key]:
        """Take back what the old rule of each existing job whose new definition changes
        what its calendar or windows skip recorded ahead, in one statement, so the job is
        planned through those slots, not past them; the jobs that had any."""
        ruled = {
            found[p.key]["id"]: p.key
            for p in pending
            if p.key in found and _rule_changes(found[p.key], p.params)
        }
        return {ruled[i] for i in await self._rules.withdraw(list(ruled), db_now)}

    async def past_records(
        self, pending: Sequence[Pending], found: Mapping[bulk.Key, Row], db_now: datetime
    ) -> None:
        """An existing job a new timing plans again starts past the slots that have a record
        already (skip-next writes them ahead), so none is run and its record overwritten
        (test_a_new_timing_never_runs_a_slot_skip_next_recorded). One whose slot's time has
        come but not its start (deferred by a window, held at its gate) keeps that slot,
        decided by the new rule at its claim: a new definition never moves a job past a
        slot it owes without a record (test_a_new_timing_keeps_a_slot_a_window_deferred).
        One paused until a time to come starts at its first slot at or after that time, as
        the pause planned it (test_a_new_timing_keeps_a_pause_until_its_time).
        The jobs of the batch with a record at or after their planned slot are asked for
        at once; only those go through ``open_run``."""
        planned: dict[bulk.Key, tuple[Decision, Decision]] = {}
        retries: set[bulk.Key] = set()  # kept for their retry: their slot has its record
        for p in pending:
            schedule, job = p.spec.parsed_schedule(), found.get(p.key)
            if job is None or schedule.chain or schedule.at is not None:
                continue
            fresh = first_run(schedule, p.rule, db_now)  # as _params planned it
            owed = owes(job, db_now)
            planned[p.key] = (
                fresh,
                current_run(schedule, p.rule, job["slot_at"])
                if owed
                else first_run(schedule, p.rule, planned_from(job["paused_until"], db_now)),
            )
            if owed and job["attempt"] > 1:
                retries.add(p.key)
        slots = [(found[key]["id"], run.slot) for key, (_, run) in planned.items()]
        recorded = await bulk.recorded_from(self._db, slots)
        for p in pending:
            if p.key not in planned:
                continue
            (fresh, run), job_id, spec = planned[p.key], found[p.key]["id"], p.spec
            if job_id in recorded and p.key not in retries:
                run = await open_run(self._db, job_id, spec.parsed_schedule(), p.rule, run, db_now)
            if run != fresh:
                p.params.update(
                    next_run_at=jittered_start(run, spec.tenant, spec.name, spec.jitter_s),
                    slot_at=run.slot,
                    slot_origin=origin_of(run),
                )

    async def planned_skips(
        self,
        row: Mapping[str, Any] | None,
        spec: JobSpec,
        rule: CalendarRule | None,
        slot_at: datetime,
        db_now: datetime,
    ) -> None:
        """A job written and planned afresh records the slots its calendar or windows skip
        before its first slot ``slot_at`` (a job created on a Saturday: the weekend's), from
        now, or from the end of its pause --until (the slots inside it are not recorded)."""
        if row is not None and rule is not None:
            schedule = spec.parsed_schedule()
            after = planned_from(row["paused_until"], db_now)
            await self._rules.record_skips(row["id"], schedule, rule, after, slot_at, db_now)


def _rule_changes(job: Mapping[str, Any], params: Mapping[str, Any]) -> bool:
    """Whether ``job`` has a calendar or windows and writing ``params`` over it changes
    which of its slots they skip (a label decides which windows cover it)."""
    return job["calendar_rule"] is not None and any(
        job[c] != getattr(params[c], "obj", params[c]) for c in _RULED
    )


def owes(job: Mapping[str, Any], db_now: datetime) -> bool:
    """Whether the job's row holds a slot whose time has come but whose start has not:
    deferred by a window, held at its gate, or failed and waiting for its retry (the
    upsert keeps the retry's attempt and time, ``upsert_jobs``); not a trigger's or a
    pause, nor an each-zone parent's, which never runs (its children owe its slots). A slot
    simply due (no node ran it: an outage) is dropped by the new timing as its plan shows
    (``JobPlan.dropped``), as before."""
    until = job["paused_until"]
    return bool(
        job["status"] == JobStatus.IDLE
        and not job["each_zone"]
        and job["slot_at"] <= db_now
        and (job["gate_wait"] or job["next_run_at"] > db_now)
        and job["slot_origin"] != "trigger"
        and not job["paused"]
        and (until is None or until <= db_now)
    )
