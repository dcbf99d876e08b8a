"""Job definitions, the part of ``JobStore`` that turns ``JobSpec``s into job rows: ``add``,
``apply`` and ``sync`` (``pulse jobs add``, ``pulse apply``, ``pulse node --sync-jobs``): its
first slot and jittered start, its default shard (``Placement`` moves it to its zones' after
the upsert). An apply plans and writes its jobs a batch at a time, a statement each
(``cluster.store.jobstore.bulk``), and an each-zone job's children follow it in the same
transaction (``Children``). A part of ``JobStore``, on its scoped connection; the store
keeps what acts on jobs that exist."""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from psycopg.types.json import Jsonb

from cluster.errors import Conflict, InvalidInput, PulseError
from cluster.jobs.models import Job, JobStatus
from cluster.jobs.options import Declared
from cluster.jobs.spec import OPTIONS, JobSpec
from cluster.store.connect import Row
from cluster.store.jobstore import bulk, dropped
from cluster.store.jobstore.calendar_rule import Rules
from cluster.store.jobstore.children import Children
from cluster.store.jobstore.gates import Gates
from cluster.store.jobstore.placement import Placement
from cluster.store.jobstore.quotas import check_period
from cluster.store.jobstore.releases import refuse_unknown_each_node
from cluster.store.jobstore.replanning import Pending, Replanning
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
from cluster.timing.runs import first_run, origin_of
from cluster.timing.schedule import CHAINED_NEXT, ENDED
from ring import shard_for

# The options upsert_jobs writes, each as the parameter named after its column.
_WRITTEN = tuple(d for d in OPTIONS if d.column is not None and d.option.written)


def _stored(declared: Declared, value: Any) -> Any:
    return Jsonb(value) if declared.option.jsonb and value is not None else value


class Definitions:
    def __init__(self, db: ScopedConnection, rules: Rules) -> None:
        self._db = db
        self._rules = rules
        self._gates = Gates(db)
        self._replanning = Replanning(db, rules)
        self._placement = Placement(db)
        self._children = Children(db)

    async def add(self, spec: JobSpec, *, now: datetime | None = None) -> Job:
        """Create a job; ``InvalidInput`` if (tenant, name) exists."""
        spec = spec.validated()
        shards = await self._db.shard_count()
        async with self._db.transaction():
            db_now = await self._db.db_now(now)
            await self._check_periods([spec], db_now)
            await refuse_unknown_each_node(self._db, [spec])
            rule = await self._rules.for_spec(spec, db_now)
            params = self._params(spec, shards, db_now, rule)
            refuse_past(spec, params, await self._db.db_now(now))
            row = await self._upsert_one(params, replace=False)
            if row is None:
                raise Conflict(
                    "name",
                    f"a job named {spec.name!r} already exists in tenant {spec.tenant!r}",
                )
            await self._replanning.planned_skips(row, spec, rule, params["slot_at"], db_now)
            placed = await self._placement.place(spec, shards, params, row, db_now, inserted=True)
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
            woken: set[int] = set()
            for chunk in bulk.chunks(specs):
                found = await bulk.rows_named(self._db, [(s.tenant, s.name) for s in chunk])
                _refuse_children(chunk, found)
                await refuse_unknown_each_node(self._db, chunk, found)
                pending: list[Pending] = []
                for spec in chunk:
                    try:
                        rule = await self._rules.for_spec(spec, db_now, windows)
                    except PulseError:  # the jobs before it first, as if written one by one
                        await self._write(pending, found, by, shards, db_now, result, woken)
                        raise
                    params = self._params(spec, shards, db_now, rule)
                    pending.append(Pending(spec, rule, params))
                    if _refusable(spec, found, params, db_now):
                        await self._write(pending, found, by, shards, db_now, result, woken)
                        pending = []
                await self._write(pending, found, by, shards, db_now, result, woken)
            await bulk.notify(self._db, woken)
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
                await self._children.release([r["id"] for r in rows if r["each_zone"]])
        return result

    async def _write(
        self,
        pending: Sequence[Pending],
        found: Mapping[bulk.Key, Row],
        by: str,
        shards: int,
        db_now: datetime,
        result: ApplyResult,
        woken: set[int],
    ) -> None:
        """Write a batch of ``apply``: its jobs in one statement, then what each needs
        besides (its planned skips, its zones' shard), each labelled in ``result`` and its
        shard in ``woken``."""
        if not pending:
            return
        replanning = self._replanning
        withdrawn = await replanning.take_back(pending, found, db_now)
        await replanning.past_records(pending, found, db_now)
        planned = {p.key: p.params for p in pending}
        owed = dropped.owed(planned, found, db_now)
        if await dropped.record_ahead(self._db, owed, planned, found, db_now, by):
            owed = []
        rows = await bulk.upsert(self._db, [p.params for p in pending], replace=True)
        await dropped.record_moved(self._db, owed, found, rows, db_now, by)
        for p in pending:
            spec, params = p.spec, p.params
            row: dict[str, Any] | None = rows.get(p.key)
            await replanning.planned_skips(row, spec, p.rule, params["slot_at"], db_now)
            if row is None and p.key in withdrawn:  # not moved after all: recorded again
                job = found[p.key]
                await replanning.planned_skips(job, spec, p.rule, job["slot_at"], db_now)
            label = label_of(spec.tenant, spec.name)
            job = row if row is not None else found[p.key]
            inserted = row is not None and row["inserted"]
            if spec.each_zone and not inserted and not job["each_zone"]:
                await dropped.record_parked(self._db, job, db_now, by)
            placed = await self._placement.place(
                spec, shards, params, job, db_now, inserted=inserted
            )
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
            woken.add(row["shard_id"])
        parents = [row for row in rows.values() if row["each_zone"]]
        woken |= await self._children.follow(parents, db_now, by)
        await self._children.release([j["id"] for j in found.values() if j["each_zone"]])

    async def _upsert_one(self, params: dict[str, Any], *, replace: bool) -> Row | None:
        return (await bulk.upsert(self._db, [params], replace=replace)).get(
            (params["tenant_id"], params["name"])
        )

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
        locked = await bulk.locked_revisions(self._db, sorted(expect))
        for (tenant, name), revision in sorted(expect.items()):
            found = locked.get((tenant, name), 0)
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
            await refuse_unknown_each_node(self._db, specs)
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
                row = await self._upsert_one(params, replace=False)
                if row is not None:
                    placed = await self._placement.place(
                        spec, shards, params, row, db_now, inserted=True
                    )
                    result.created.append(label)
                    await self._db.notify(row["shard_id"] if placed is None else placed)
                elif await bulk.probe(self._db, [params]):  # an apply would change it
                    result.differing.append(label)
                else:
                    result.unchanged.append(label)
            created = set(result.created)
            await self._gates.write(
                [s for s in specs if label_of(s.tenant, s.name) in created], db_now
            )
        return result

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
            "timing_from": db_now,
        }


def _refuse_children(specs: Sequence[JobSpec], found: Mapping[bulk.Key, Row]) -> None:
    """``InvalidInput`` for a spec named as an each-zone job's child (``name@zone``): its
    parent's definition is the child's, and the child follows an apply of the parent."""
    for spec in specs:
        job = found.get((spec.tenant, spec.name))
        if job is not None and job["parent_id"] is not None:
            raise InvalidInput(
                "name",
                f"{spec.name!r} is a child of an each-zone job: apply that job, and each of "
                "its children follows",
            )


def _refusable(
    spec: JobSpec, found: Mapping[bulk.Key, Row], params: dict[str, Any], db_now: datetime
) -> bool:
    """Whether writing ``spec`` may be refused after its upsert (``refuse_past``, a watch
    job's move): its batch ends with it, so the error a file with several raises is the one
    writing its jobs one by one would raise first."""
    job = found.get((spec.tenant, spec.name))
    return bool(
        params["slot_at"] >= ENDED
        or past_one_off(spec, params, db_now)
        or spec.watch
        or (job is not None and job["watch"])
    )
