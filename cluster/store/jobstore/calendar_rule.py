"""Each job's time rule, the copy it keeps in ``jobs.calendar_rule``: its calendar with
``on_excluded`` and ``business_day``, and the blackout windows not yet over that cover it.
A job with neither keeps NULL and plans as a plain schedule.

Built when a job is written (``Definitions``) and rebuilt, with the job's next slot planned
again, when a calendar or window changes (``Calendars``, ``Windows``), in the change's
transaction (docs/design/calendars.md). A part of ``JobStore``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any

from cluster.errors import InvalidInput
from cluster.jobs.models import JobStatus
from cluster.jobs.spec import JobSpec
from cluster.store.jobstore.holds import open_run
from cluster.store.jobstore.scoped import ScopedConnection
from cluster.timing.calendared import EVERY_DAY, CalendarRule, Window, jittered_start
from cluster.timing.calendars import Calendar
from cluster.timing.fate import skipped_between
from cluster.timing.instants import US
from cluster.timing.runs import current_run, first_run, origin_of, planned_from
from cluster.timing.schedule import Schedule, parse_schedule

__all__ = ["KEEP_PAST", "Rules", "covers", "window_of"]

KEEP_PAST = timedelta(days=400)


def window_of(row: dict[str, Any]) -> Window:
    return Window(row["id"], row["starts_at"], row["ends_at"], row["defer"])


def covers(row: dict[str, Any], tenant: str, name: str, labels: Mapping[str, str]) -> bool:
    """Whether the window ``row`` applies to the job ``tenant``/``name`` with ``labels``."""
    scope = row["window_scope"]
    if scope == "cluster":
        return True
    if scope == "label":
        mine = row["tenant_id"] is None or row["tenant_id"] == tenant
        return bool(mine and labels.get(row["label_key"]) == row["label_value"])
    return bool(row["tenant_id"] == tenant and (scope == "tenant" or row["job_name"] == name))


class Rules:
    def __init__(self, db: ScopedConnection) -> None:
        self._db = db

    async def active(self, db_now: datetime) -> list[dict[str, Any]]:
        """The windows not over by ``db_now``, for ``for_spec`` to filter."""
        return await self._db.all("active_windows", {"now": db_now})

    async def for_spec(
        self, spec: JobSpec, db_now: datetime, windows: Sequence[dict[str, Any]] | None = None
    ) -> CalendarRule | None:
        """The rule ``spec`` plans with (``windows``: ``active``'s, read if not given); its
        calendar is held (``lock_calendar``) until the transaction ends. ``InvalidInput`` for
        an unknown calendar."""
        if spec.parsed_schedule().chain:
            return None  # no clock: windows and calendars do not apply (docs/design/chains.md)
        calendar = EVERY_DAY
        if spec.calendar is not None:
            await self._db.one("lock_calendar", {"name": spec.calendar})
            row = await self._db.one("read_calendar", {"name": spec.calendar})
            if row is None:
                known = "pulse calendars list"
                raise InvalidInput("calendar", f"unknown calendar {spec.calendar!r} ({known})")
            calendar = _calendar(row, db_now)
        if windows is None:
            windows = await self.active(db_now)
        mine = tuple(
            window_of(w) for w in windows if covers(w, spec.tenant, spec.name, spec.labels)
        )
        if spec.calendar is None and not mine:
            return None
        return CalendarRule(calendar, spec.on_excluded, spec.business_day, mine)  # type: ignore[arg-type]

    async def replan(self, jobs: Sequence[dict[str, Any]], db_now: datetime) -> tuple[str, ...]:
        """Rebuild the rule of each of ``jobs`` (rows of ``calendar_jobs``, locked) and plan
        its next slot again; ``InvalidInput`` naming a job whose schedule could no longer
        run. Returns the jobs' labels."""
        calendars: dict[str, Calendar] = {}
        windows = await self._db.all("active_windows", {"now": db_now})
        shards: set[int] = set()
        for job in jobs:
            label = f"{job['tenant_id']}/{job['name']}"
            rule = await self._rule(job, calendars, windows, db_now)
            if job["status"] == JobStatus.DONE:  # no slot left to plan: its rule's copy
                kept = {c: job[c] for c in ("id", "next_run_at", "slot_at")}
                copy = None if rule is None else rule.to_json()
                params = {**kept, "calendar_rule": copy, "slot_origin": None, "now": db_now}
                await self._db.one("replan_calendar_job", params)
                continue
            # Walked as the node walks it: a slot kept from before a new timing goes on to
            # the new timing's slots after the change, never to those before, which were
            # no slots of the job (Schedule.starting).
            schedule = parse_schedule(
                job["schedule"], job["tz"], job["dst_repeated"], job["dst_skipped"]
            ).starting(job["timing_from"])
            owed = job["slot_at"] <= db_now and schedule.at is None
            after = planned_from(job["paused_until"], db_now)  # a pause --until stays
            # What the old rule recorded ahead is the new rule's to decide: taken back, so
            # a window called off or a holiday taken out runs its slots
            # (test_a_window_called_off_runs_the_slots_it_had_recorded_skipped_ahead).
            withdrawn = bool(await self.withdraw([job["id"]], db_now))
            try:
                # A slot whose time has come (due, deferred, held at its gate) is kept: its
                # claim decides it under the new rule, so it runs or is recorded skipped
                # with its true reason (test_a_window_on_a_job_held_at_its_gate_...).
                run = current_run(schedule, rule, job["slot_at"]) if owed else None
                run = run or first_run(schedule, rule, after)
            except InvalidInput as exc:
                raise InvalidInput("calendar", f"job {label}: {exc}") from exc
            # Never onto a slot skip-next recorded
            # (test_a_window_never_runs_a_slot_skip_next_recorded).
            run = await open_run(self._db, job["id"], schedule, rule, run, db_now)
            start = jittered_start(run, job["tenant_id"], job["name"], job["jitter_s"])
            if run.slot == job["slot_at"] and job["gate_wait"]:
                start = job["next_run_at"]  # still held: until its gate opens or its bound
            params = {
                "id": job["id"],
                "calendar_rule": None if rule is None else rule.to_json(),
                "next_run_at": start,
                "slot_at": run.slot,
                "slot_origin": origin_of(run),
                "now": db_now,
            }
            updated = await self._db.one("replan_calendar_job", params)
            if updated is not None:
                shards.add(updated["shard_id"])
                # The slots the new rule skips from the job's old slot (or now, or the end
                # of its pause --until, if that is over, or if the old rule's skips ahead
                # were taken back) to its new one (tests/integration/test_fate_defects.py).
                since = (after if withdrawn else max(job["slot_at"], after)) - US
                await self.record_skips(job["id"], schedule, rule, since, run.slot, db_now)
        for shard in sorted(shards):
            await self._db.notify(shard)
        return tuple(f"{job['tenant_id']}/{job['name']}" for job in jobs)

    async def withdraw(self, job_ids: Sequence[Any], db_now: datetime) -> set[Any]:
        """Take back the skips the calendar or windows of each of ``job_ids`` recorded ahead
        of their slot, before the jobs are planned again under a new rule, in one statement;
        the ids of the jobs that had any."""
        if not job_ids:
            return set()
        rows = await self._db.all("withdraw_rule_skips", {"ids": list(job_ids), "now": db_now})
        return {row["job_id"] for row in rows}

    async def record_skips(
        self,
        job_id: Any,
        schedule: Schedule,
        rule: CalendarRule | None,
        after: datetime,
        before: datetime,
        db_now: datetime,
    ) -> None:
        """Record skipped the slots in ``(after, before)`` that ``rule`` skips, ``before``
        being the job's slot as just planned: no completion passes them (L1)."""
        skips = skipped_between(schedule, rule, after, before)
        if skips:
            text = json.dumps([[p.slot.isoformat(), p.reason] for p in skips])
            await self._db.all("record_planned_skips", {"id": job_id, "skips": text, "now": db_now})

    async def _rule(
        self,
        job: dict[str, Any],
        calendars: dict[str, Calendar],
        windows: Sequence[dict[str, Any]],
        db_now: datetime,
    ) -> CalendarRule | None:
        labels = job.get("labels") or {}
        mine = tuple(
            window_of(w) for w in windows if covers(w, job["tenant_id"], job["name"], labels)
        )
        name = job["calendar"]
        if name is None and not mine:
            return None
        calendar = EVERY_DAY
        if name is not None:
            if name not in calendars:
                await self._db.one("lock_calendar", {"name": name})
                row = await self._db.one("read_calendar", {"name": name})
                assert row is not None, "a foreign key keeps a used calendar"
                calendars[name] = _calendar(row, db_now)
            calendar = calendars[name]
        return CalendarRule(calendar, job["on_excluded"] or "skip", job["business_day"], mine)


def _calendar(row: dict[str, Any], db_now: datetime) -> Calendar:
    """The calendar of ``row`` as a job keeps it: without the dates long past, which no
    plan looks at (catch-up reaches back as far as an outage, not years)."""
    cutoff = db_now.date() - KEEP_PAST
    excluded = frozenset(d for d in row["excluded"] if d >= cutoff)
    return Calendar(row["name"], frozenset(row["weekdays"]), excluded)
