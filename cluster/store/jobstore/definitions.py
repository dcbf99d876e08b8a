"""Job definitions, the part of ``JobStore`` that turns ``JobSpec``s into job rows: ``add``,
``apply`` and ``sync`` (``pulse jobs add``, ``pulse apply``, ``pulse node --sync-jobs``), and
where each row goes: its first slot and jittered start, its default shard, or the shard of its
zone set, or parked as an each-zone parent (docs/design/zones.md). A part of ``JobStore``, on
its scoped connection; the store keeps what acts on jobs that exist."""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from psycopg.types.json import Jsonb

from cluster.errors import Conflict
from cluster.jobs.models import Job, JobStatus
from cluster.jobs.options import Declared
from cluster.jobs.spec import OPTIONS, JobSpec
from cluster.store.housekeeping import watches
from cluster.store.jobstore.calendar_rule import Rules
from cluster.store.jobstore.dropped import dropped_slots, overdue, skips_json
from cluster.store.jobstore.gates import Gates
from cluster.store.jobstore.holds import open_run
from cluster.store.jobstore.quotas import check_period
from cluster.store.jobstore.scoped import ScopedConnection
from cluster.store.jobstore.specs import (
    ApplyResult,
    SyncResult,
    checked,
    label_of,
    past_one_off,
    refuse_past,
)
from cluster.store.queries import query
from cluster.timing.calendared import CalendarRule, Decision, jittered_start
from cluster.timing.runs import current_run, first_run, origin_of
from cluster.timing.schedule import CHAINED_NEXT, ENDED
from ring import shard_for
from ring.zones import PARKED_SHARD, WATCH_SHARD, ZONE_SHARD_BASE, zone_shard_for

# The options upsert_job writes, each as the parameter named after its column.
_WRITTEN = tuple(d for d in OPTIONS if d.column is not None and d.option.written)


def _stored(declared: Declared, value: Any) -> Any:
    return Jsonb(value) if declared.option.jsonb and value is not None else value


class _Probe(Exception):  # a rollback carrying an answer, never an error
    def __init__(self, changed: bool) -> None:
        self.changed = changed


class _Probed(Exception):  # a rollback carrying the row as a statement left it
    def __init__(self, row: dict[str, Any] | None) -> None:
        self.row = row


class Definitions:
    def __init__(self, db: ScopedConnection, rules: Rules) -> None:
        self._db = db
        self._rules = rules
        self._gates = Gates(db)

    async def add(self, spec: JobSpec, *, now: datetime | None = None) -> Job:
        """Create a job; ``InvalidInput`` if (tenant, name) exists."""
        spec = spec.validated()
        shards = await self._db.shard_count()
        async with self._db.transaction():
            db_now = await self._db.db_now(now)
            await self._check_periods([spec], db_now)
            rule = await self._rules.for_spec(spec, db_now)
            params = self._params(spec, shards, db_now, rule)
            refuse_past(spec, params, await self._db.db_now(now))
            row = await self._db.one("upsert_job", {**params, "replace": False})
            if row is None:
                raise Conflict(
                    "name",
                    f"a job named {spec.name!r} already exists in tenant {spec.tenant!r}",
                )
            await self._planned_skips(row, spec, rule, params, db_now)
            placed = await self._place(spec, shards, params["next_run_at"], inserted=True)
            await self._db.notify(row["shard_id"] if placed is None else placed)
            await self._gates.write([spec], await self._db.db_now(now))
            job = await self._db.one("get_job", {"tenant_id": spec.tenant, "name": spec.name})
        assert job is not None
        return Job.from_row(job)

    async def apply(
        self,
        specs: Sequence[JobSpec],
        *,
        prune: bool = False,
        now: datetime | None = None,
        expect: Mapping[tuple[str, str], int] | None = None,
    ) -> ApplyResult:
        """Create or update every spec by (tenant, name), all or nothing. ``expect``: the
        revision each (tenant, name) must be at (0: absent), else ``Conflict`` on ``plan``
        and nothing is written (a plan gone stale, docs/jobs.md)."""
        return await self._apply(specs, "pulse jobs apply", prune=prune, now=now, expect=expect)

    async def _apply(
        self,
        specs: Sequence[JobSpec],
        by: str,
        *,
        prune: bool = False,
        now: datetime | None = None,
        expect: Mapping[tuple[str, str], int] | None = None,
    ) -> ApplyResult:
        """``apply``, naming what the overdue slots a new timing drops are recorded skipped
        by (``cluster.store.jobstore.dropped``): ``Revisions.restore`` (``pulse jobs
        rollback``) applies through it, and ``apply``'s public signature stays as it is."""
        specs = checked(specs)
        shards = await self._db.shard_count()
        result = ApplyResult()
        async with self._db.transaction():
            if expect:
                await self._expect(expect)
            db_now = await self._db.db_now(now)
            await self._check_periods(specs, db_now)
            windows = await self._rules.active(db_now)
            for spec in specs:
                rule = await self._rules.for_spec(spec, db_now, windows)
                params = {**self._params(spec, shards, db_now, rule), "replace": True}
                params.update(await self._past_records(spec, rule, db_now, params))
                await self._record_dropped(spec, params, db_now, by)
                row = await self._db.one("upsert_job", params)
                await self._planned_skips(row, spec, rule, params, db_now)
                label = label_of(spec.tenant, spec.name)
                inserted = row is not None and row["inserted"]
                placed = await self._place(spec, shards, params["next_run_at"], inserted=inserted)
                if placed is not None:  # moved to its zone set's shard
                    row = {
                        "inserted": row is not None and row["inserted"],
                        "shard_id": placed,
                        "status": JobStatus.IDLE if row is None else row["status"],
                    }
                if row is None:
                    result.unchanged.append(label)
                    continue
                if row["status"] != JobStatus.DONE:  # a changed or new job due again
                    refuse_past(spec, params, db_now)
                (result.created if row["inserted"] else result.updated).append(label)
                await self._db.notify(row["shard_id"])
            for label in await self._gates.write(specs, db_now):
                if label in result.unchanged:  # only its edges changed
                    result.unchanged.remove(label)
                    result.updated.append(label)
            if prune:
                kept = {"tenant_ids": [s.tenant for s in specs], "names": [s.name for s in specs]}
                await self._gates.refuse_orphans(kept)
                cur = await self._db.conn.execute(query("remove_jobs_except"), kept)
                rows = await cur.fetchall()
                result.removed = [label_of(r["tenant_id"], r["name"]) for r in rows]
        return result

    async def _check_periods(self, specs: Sequence[JobSpec], now: datetime) -> None:
        """``InvalidInput`` for a spec whose tenant's quota sets a shortest period that its
        schedule runs under (the database cannot read a schedule)."""
        tenants = sorted({s.tenant for s in specs})
        rows = await self._db.all("tenant_min_periods", {"tenant_ids": tenants})
        capped = {r["tenant_id"]: r["min_period_s"] for r in rows if r["min_period_s"]}
        for spec in specs:
            if spec.tenant in capped:
                check_period(spec, capped[spec.tenant], now)

    async def _expect(self, expect: Mapping[tuple[str, str], int]) -> None:
        for (tenant, name), revision in sorted(expect.items()):
            row = await self._db.one("lock_job", {"tenant_id": tenant, "name": name})
            found = 0 if row is None else int(row["revision"])
            if found != revision:
                raise Conflict(
                    "plan",
                    f"stale: job {label_of(tenant, name)} is at revision {found}, the plan "
                    f"saw {revision}; plan again",
                )

    async def sync(self, specs: Sequence[JobSpec], *, now: datetime | None = None) -> SyncResult:
        """Create the jobs of ``specs`` that do not exist yet and report, never overwrite,
        the existing ones whose definition differs (``pulse node --sync-jobs``).

        One transaction under an advisory lock: nodes starting together sync one after
        another, and the later ones find their jobs created (docs/design/python-api.md).
        """
        specs = checked(specs)
        shards = await self._db.shard_count()
        result = SyncResult()
        async with self._db.transaction():
            await self._db.conn.execute(
                query("lock_job_sync"), {"schema": self._db.settings.schema}
            )
            db_now = await self._db.db_now(now)
            await self._check_periods(specs, db_now)
            windows = await self._rules.active(db_now)
            for spec in specs:
                rule = await self._rules.for_spec(spec, db_now, windows)
                params = self._params(spec, shards, db_now, rule)
                label = label_of(spec.tenant, spec.name)
                if past_one_off(spec, params, db_now):
                    # A one-off that ran (and may have been removed) stays declared in
                    # code: never created again, and never a reason not to start.
                    result.unchanged.append(label)
                    continue
                row = await self._db.one("upsert_job", {**params, "replace": False})
                if row is not None:
                    placed = await self._place(spec, shards, params["next_run_at"], inserted=True)
                    result.created.append(label)
                    await self._db.notify(row["shard_id"] if placed is None else placed)
                elif await self._would_change(params):
                    result.differing.append(label)
                else:
                    result.unchanged.append(label)
            created = set(result.created)
            await self._gates.write(
                [s for s in specs if label_of(s.tenant, s.name) in created], db_now
            )
        return result

    async def _planned_skips(
        self,
        row: dict[str, Any] | None,
        spec: JobSpec,
        rule: CalendarRule | None,
        params: dict[str, Any],
        db_now: datetime,
    ) -> None:
        """A job written and planned afresh records the slots its calendar or windows skip
        before its first slot (a job created on a Saturday: the weekend's)."""
        if row is not None and rule is not None:
            schedule = spec.parsed_schedule()
            await self._rules.record_skips(
                row["id"], schedule, rule, db_now, params["slot_at"], db_now
            )

    async def _record_dropped(
        self, spec: JobSpec, params: dict[str, Any], db_now: datetime, by: str
    ) -> None:
        """Record skipped the overdue slots of an existing job that ``params`` leaves without
        a record (``dropped_slots``), before the upsert moves the job (so a login that
        writes no past runs may record them: ``record_skipped``). Where the upsert puts the
        job is asked of the upsert itself, in a savepoint rolled back: only for a job whose
        slot is overdue, which is rare."""
        key = {"tenant_id": spec.tenant, "name": spec.name}
        found = await self._db.one("get_job", key)
        if found is None or not overdue(found, db_now):
            return
        try:
            async with self._db.transaction():
                await self._db.one("upsert_job", params)
                raise _Probed(await self._db.one("get_job", key))
        except _Probed as probe:
            probed = probe.row
        if probed is None:
            return
        skips = dropped_slots(Job.from_row(found), Job.from_row(probed), db_now, by)
        if skips:
            record = {"id": found["id"], "skips": skips_json(skips), "now": db_now}
            await self._db.all("record_skips", record)

    async def _would_change(self, params: dict[str, Any]) -> bool:
        """Whether applying would update the job: the upsert, run in a savepoint that is
        then rolled back, so "differs" means exactly what ``apply`` would change."""
        try:
            async with self._db.transaction():
                row = await self._db.one("upsert_job", {**params, "replace": True})
                raise _Probe(row is not None)
        except _Probe as probe:
            return probe.changed

    async def _past_records(
        self, spec: JobSpec, rule: CalendarRule | None, db_now: datetime, params: dict[str, Any]
    ) -> dict[str, Any]:
        """An existing job a new timing plans again starts past the slots that have a record
        already (skip-next writes them ahead), so none is run and its record overwritten
        (test_a_new_timing_never_runs_a_slot_skip_next_recorded). One whose slot's time has
        come but not its start (deferred by a window, held at its gate) keeps that slot,
        decided by the new rule at its claim: a new definition never moves a job past a
        slot it owes without a record (test_a_new_timing_keeps_a_slot_a_window_deferred)."""
        schedule = spec.parsed_schedule()
        if schedule.chain or schedule.at is not None:
            return {}
        found = await self._db.one("get_job", {"tenant_id": spec.tenant, "name": spec.name})
        if found is None:
            return {}
        fresh = first_run(schedule, rule, db_now)
        owed = _owes(found, db_now)
        planned = current_run(schedule, rule, found["slot_at"]) if owed else fresh
        run = await open_run(self._db, found["id"], schedule, rule, planned, db_now)
        if run == fresh:
            return {}
        return {
            "next_run_at": jittered_start(run, spec.tenant, spec.name, spec.jitter_s),
            "slot_at": run.slot,
            "slot_origin": origin_of(run),
        }

    def _params(
        self, spec: JobSpec, shards: int, db_now: datetime, rule: CalendarRule | None
    ) -> dict[str, Any]:
        job_id = uuid.uuid4()
        if spec.parsed_schedule().chain:  # no clock: it waits for its first release
            run = Decision(CHAINED_NEXT, ENDED, True)
        else:
            run = first_run(spec.parsed_schedule(), rule, db_now)  # @at: its one slot
        params = {str(d.column): _stored(d, getattr(spec, d.name)) for d in _WRITTEN}
        return {
            **params,
            "id": job_id,
            "tenant_id": spec.tenant,
            "name": spec.name,
            "shard_id": shard_for(job_id, shards),
            "next_run_at": jittered_start(run, spec.tenant, spec.name, spec.jitter_s),
            "slot_at": run.slot,
            "on_excluded": None if rule is None else spec.on_excluded,
            "calendar_rule": None if rule is None else rule.to_json(),
            "slot_origin": origin_of(run),
        }

    async def _place(
        self, spec: JobSpec, shards: int, next_run_at: datetime, *, inserted: bool
    ) -> int | None:
        """Move the job to the shard of its zone set, back to the default shards, or park
        it as an each-zone parent (docs/design/zones.md).

        Returns the new shard if the job moved, None if it was already in place. Separate
        statements from ``upsert_job``, in the same transaction: nobody sees the job in
        the wrong shard."""
        job = await self._db.one("get_job", {"tenant_id": spec.tenant, "name": spec.name})
        assert job is not None
        if spec.watch or job["watch"]:  # never zoned (JobSpec): the watch shard or nothing
            placed = await watches.place(self._db.all, spec.watch, job, inserted)
            return WATCH_SHARD if placed else None
        key = {"tenant_id": spec.tenant, "name": spec.name}
        zones = list(spec.zones) or None
        if spec.each_zone:
            parked = {**key, "zones": zones, "shard_id": PARKED_SHARD}
            return None if await self._db.one("park_each_zone", parked) is None else PARKED_SHARD
        if job.get("each_zone"):
            await self._db.one("unpark_each_zone", {**key, "next_run_at": next_run_at})
        elif tuple(job.get("zones") or ()) == spec.zones and (
            spec.zones or job["shard_id"] < ZONE_SHARD_BASE
        ):
            return None
        if spec.zones:
            space = await self._zone_space(spec.zones)
            shard = zone_shard_for(job["id"], space)
        else:
            shard = shard_for(job["id"], shards)
        moved = await self._db.one("set_job_zones", {**key, "zones": zones, "shard_id": shard})
        return None if moved is None else shard

    async def _zone_space(self, zones: tuple[str, ...]) -> int:
        while True:  # no row: a concurrent first use of the set, committed by now
            found = await self._db.one("zone_space", {"zones": list(zones)})
            if found is not None:
                return int(found["space"])


def _owes(job: Mapping[str, Any], db_now: datetime) -> bool:
    """Whether the job's row holds a slot whose time has come but whose start has not:
    deferred by a window, or held at its gate (not a trigger's, a retry or a pause). A slot
    simply due (no node ran it: an outage) is dropped by the new timing as its plan shows
    (``JobPlan.dropped``), as before."""
    until = job["paused_until"]
    return bool(
        job["status"] == JobStatus.IDLE
        and job["attempt"] == 1
        and job["slot_at"] <= db_now
        and (job["gate_wait"] or job["next_run_at"] > db_now)
        and job["slot_origin"] != "trigger"
        and not job["paused"]
        and (until is None or until <= db_now)
    )
