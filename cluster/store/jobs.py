"""The job store: Pulse's Python API for creating and managing jobs at run time.

``JobStore`` wraps one admin connection. Every write validates first (``JobSpec``), runs in
one transaction, and wakes the claim loops of the job's shard with ``NOTIFY``. The CLI is a
thin layer over this class.

    async with JobStore.open(ClusterSettings.from_env()) as store:
        await store.add(JobSpec.build("rollup", "0 * * * *", "billing.jobs:rollup"))
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from datetime import datetime
from typing import Any

import psycopg
from psycopg.types.json import Jsonb

from cluster.errors import Conflict, NotFound, StoreError
from cluster.jitter import jittered
from cluster.jobspec import DEFAULT_TENANT, JobSpec, check_text
from cluster.models import Job, Run, iso
from cluster.retention import Retention
from cluster.settings import ClusterSettings
from cluster.store import config as cluster_config
from cluster.store import pruning
from cluster.store.access import Access
from cluster.store.connect import Conn, connect, connection, describe
from cluster.store.migrate import InitResult, migrate, stored_shard_count
from cluster.store.pages import Pages
from cluster.store.pruning import PruneResult
from cluster.store.queries import query
from cluster.store.runcontrol import RunControl
from cluster.store.specs import (
    MAX_NOTE_LENGTH,
    ApplyResult,
    SyncResult,
    check_params,
    checked,
    label_of,
    past_one_off,
    refuse_past,
)
from ring import shard_for
from ring.zones import PARKED_SHARD, ZONE_SHARD_BASE, zone_shard_for


class _Probe(Exception):  # a rollback carrying an answer, never an error
    def __init__(self, changed: bool) -> None:
        self.changed = changed


class JobStore(RunControl):
    """``scope``: the one tenant this store reads and changes (an API token's), else all;
    every statement on a job filters by it (``%(scope)s`` in queries.sql)."""

    def __init__(self, conn: Conn, settings: ClusterSettings, *, scope: str | None = None) -> None:
        self._conn = conn
        self.settings = settings
        self.scope = scope
        self._shards: int | None = None
        self.access = Access(conn)
        self.pages = Pages(conn, scope)

    @asynccontextmanager
    async def transaction(self) -> AsyncIterator[None]:
        """One transaction around several calls (a change and its audit row)."""
        try:
            async with self._conn.transaction():
                yield
        except psycopg.Error as exc:
            raise StoreError(describe(exc)) from exc

    @classmethod
    @asynccontextmanager
    async def open(
        cls, settings: ClusterSettings, application_name: str = "pulse-admin"
    ) -> AsyncIterator[JobStore]:
        conn = await connect(settings, application_name)
        try:
            yield cls(conn, settings)
        finally:
            await conn.close()

    async def init(self, shards: int | None = None) -> InitResult:
        """Create or upgrade the schema; fix the shard count on first run; store the
        default retention where the operator has set none."""
        result = await migrate(self._conn, self.settings.schema, shards)
        self._shards = result.shards
        await cluster_config.seed_config(self._conn, Retention().to_config())
        return result

    async def config(self) -> list[tuple[str, str, datetime]]:
        """The cluster's stored settings (``pulse config show``): (key, value, updated_at)."""
        return await cluster_config.config_rows(self._conn)

    async def config_values(self) -> dict[str, str]:
        """The stored settings as {key: value}."""
        return await cluster_config.read_config(self._conn)

    async def set_config(self, key: str, value: str) -> str:
        """Set a cluster setting (``pulse config set``); returns the value as stored.
        ``InvalidInput`` naming the key, with nothing written, if the key or value is bad."""
        return await cluster_config.write_config(self._conn, key, value)

    async def prune(self, *, dry_run: bool = False, now: datetime | None = None) -> PruneResult:
        """Delete (or count) the expired runs of every shard and the alert events done
        with, in small batches (``pulse runs prune``), on a connection of its own."""
        retention = Retention.from_config(await cluster_config.read_config(self._conn))
        shards = range(await self.shard_count())
        async with connection(self.settings, "pulse-admin/prune") as conn:
            await pruning.setup(conn)
            return await pruning.prune(conn, retention, shards, now=now, dry_run=dry_run)

    async def shard_count(self) -> int:
        if self._shards is None:
            self._shards = await stored_shard_count(self._conn)
        return self._shards

    async def db_now(self, now: datetime | None = None) -> datetime:
        row = await self._one("db_now", {"now": now})
        assert row is not None
        value: datetime = row["now"]
        return value

    # -- writes -----------------------------------------------------------------------

    async def add(self, spec: JobSpec, *, now: datetime | None = None) -> Job:
        """Create a job; ``InvalidInput`` if (tenant, name) exists."""
        spec = spec.validated()
        shards = await self.shard_count()
        try:
            async with self._conn.transaction():
                params = self._params(spec, shards, await self.db_now(now))
                refuse_past(spec, params, await self.db_now(now))
                row = await self._one("upsert_job", {**params, "replace": False})
                if row is None:
                    raise Conflict(
                        "name",
                        f"a job named {spec.name!r} already exists in tenant {spec.tenant!r}",
                    )
                placed = await self._place(spec, shards, params["next_run_at"])
                await self._notify(row["shard_id"] if placed is None else placed)
                job = await self._one("get_job", {"tenant_id": spec.tenant, "name": spec.name})
        except psycopg.Error as exc:
            raise StoreError(describe(exc)) from exc
        assert job is not None
        return Job.from_row(job)

    async def apply(
        self, specs: Sequence[JobSpec], *, prune: bool = False, now: datetime | None = None
    ) -> ApplyResult:
        """Create or update every spec by (tenant, name), all or nothing."""
        specs = checked(specs)
        shards = await self.shard_count()
        result = ApplyResult()
        try:
            async with self._conn.transaction():
                db_now = await self.db_now(now)
                for spec in specs:
                    params = {**self._params(spec, shards, db_now), "replace": True}
                    row = await self._one("upsert_job", params)
                    label = label_of(spec.tenant, spec.name)
                    placed = await self._place(spec, shards, params["next_run_at"])
                    if placed is not None:  # moved to its zone set's shard
                        row = {
                            "inserted": row is not None and row["inserted"],
                            "shard_id": placed,
                            "status": "idle" if row is None else row["status"],
                        }
                    if row is None:
                        result.unchanged.append(label)
                        continue
                    if row["status"] != "done":  # a changed or new job due again
                        refuse_past(spec, params, db_now)
                    (result.created if row["inserted"] else result.updated).append(label)
                    await self._notify(row["shard_id"])
                if prune:
                    cur = await self._conn.execute(
                        query("remove_jobs_except"),
                        {
                            "tenant_ids": [s.tenant for s in specs],
                            "names": [s.name for s in specs],
                        },
                    )
                    rows = await cur.fetchall()
                    result.removed = [label_of(r["tenant_id"], r["name"]) for r in rows]
        except psycopg.Error as exc:
            raise StoreError(describe(exc)) from exc
        return result

    async def sync(self, specs: Sequence[JobSpec], *, now: datetime | None = None) -> SyncResult:
        """Create the jobs of ``specs`` that do not exist yet and report, never overwrite,
        the existing ones whose definition differs (``pulse node --sync-jobs``).

        One transaction under an advisory lock: nodes starting together sync one after
        another, and the later ones find their jobs created (docs/design/python-api.md).
        """
        specs = checked(specs)
        shards = await self.shard_count()
        result = SyncResult()
        try:
            async with self._conn.transaction():
                await self._conn.execute(query("lock_job_sync"), {"schema": self.settings.schema})
                db_now = await self.db_now(now)
                for spec in specs:
                    params = self._params(spec, shards, db_now)
                    label = label_of(spec.tenant, spec.name)
                    if past_one_off(spec, params, db_now):
                        # A one-off that ran (and may have been removed) stays declared in
                        # code: never created again, and never a reason not to start.
                        result.unchanged.append(label)
                        continue
                    row = await self._one("upsert_job", {**params, "replace": False})
                    if row is not None:
                        placed = await self._place(spec, shards, params["next_run_at"])
                        result.created.append(label)
                        await self._notify(row["shard_id"] if placed is None else placed)
                    elif await self._would_change(params):
                        result.differing.append(label)
                    else:
                        result.unchanged.append(label)
        except psycopg.Error as exc:
            raise StoreError(describe(exc)) from exc
        return result

    async def _would_change(self, params: dict[str, Any]) -> bool:
        """Whether applying would update the job: the upsert, run in a savepoint that is
        then rolled back, so "differs" means exactly what ``apply`` would change."""
        try:
            async with self._conn.transaction():
                row = await self._one("upsert_job", {**params, "replace": True})
                raise _Probe(row is not None)
        except _Probe as probe:
            return probe.changed

    async def pause(
        self, name: str, tenant: str = DEFAULT_TENANT, *, note: str | None = None
    ) -> Job:
        """Stop claiming the job; ``note`` says why (shown by list, show and status)."""
        if note is not None:
            note = check_text(note, "note").strip()[:MAX_NOTE_LENGTH] or None
        await self._write("pause_job", name, tenant, {"note": note})
        return await self.get(name, tenant)

    async def resume(
        self, name: str, tenant: str = DEFAULT_TENANT, *, now: datetime | None = None
    ) -> Job:
        """Unpause; the job continues at its next future slot."""
        try:
            async with self._conn.transaction():
                row = await self._one("lock_job", {"tenant_id": tenant, "name": name})
                if row is None:
                    raise NotFound(f"no job named {name!r} in tenant {tenant!r}")
                job = Job.from_row(row)
                spec = self._spec_of(job)
                slot = spec.parsed_schedule().next_after(await self.db_now(now))
                start = jittered(tenant, name, slot, job.jitter_s)
                await self._write(
                    "resume_job", name, tenant, {"next_run_at": start, "slot_at": slot}
                )
        except psycopg.Error as exc:
            raise StoreError(describe(exc)) from exc
        return await self.get(name, tenant)

    async def trigger(
        self, name: str, tenant: str = DEFAULT_TENANT, *, now: datetime | None = None
    ) -> Job:
        """Make the job due now without changing its regular schedule."""
        row = await self._one("trigger_job", {"tenant_id": tenant, "name": name, "now": now})
        if row is None:
            job = await self.get(name, tenant)  # raises NotFound
            raise Conflict("name", f"{job.name!r} is running now; trigger it when it ends")
        await self._notify(row["shard_id"])
        return await self.get(name, tenant)

    async def remove(self, name: str, tenant: str = DEFAULT_TENANT) -> None:
        await self._write("remove_job", name, tenant, {})

    # -- reads ------------------------------------------------------------------------

    async def get(self, name: str, tenant: str = DEFAULT_TENANT) -> Job:
        row = await self._one("get_job", {"tenant_id": tenant, "name": name})
        if row is None:
            raise NotFound(f"no job named {name!r} in tenant {tenant!r}")
        return Job.from_row(row)

    async def details(
        self, name: str, tenant: str = DEFAULT_TENANT, *, slots: int = 5, runs: int = 5
    ) -> dict[str, Any]:
        """What ``pulse jobs show --json`` prints: the job, its next slots, its latest runs."""
        job = await self.get(name, tenant)
        now = await self.db_now()
        schedule = job.parsed_schedule()
        if job.status == "idle" and job.next_run_at is not None:  # its slot, then the next
            upcoming = [job.slot_at, *schedule.next_n(job.slot_at, slots - 1)]
            starts = [job.next_run_at]  # the slot's start, or a retry's
        elif job.status == "done":
            upcoming, starts = [], []
        else:
            upcoming, starts = schedule.next_n(now, slots), []
        starts += [jittered(job.tenant, job.name, s, job.jitter_s) for s in upcoming[len(starts) :]]
        recent = await self.runs(job=job.name, tenant=job.tenant, limit=runs)
        data = job.to_json()
        data["next_slots"] = [iso(s) for s in upcoming]
        data["next_starts"] = [iso(s) for s in starts]
        data["recent_runs"] = [r.to_json() for r in recent]
        return data

    async def jobs(self, tenant: str | None = None) -> list[Job]:
        rows = await self._all("list_jobs", {"tenant_id": tenant})
        return [Job.from_row(r) for r in rows]

    async def runs(
        self,
        job: str | None = None,
        tenant: str | None = None,
        status: str | None = None,
        limit: int = 50,
    ) -> list[Run]:
        """Run history, newest slot first; attempts in flight are listed as ``running``."""
        params = {"job_name": job, "tenant_id": tenant, "status": status, "limit": limit}
        return [Run.from_row(r) for r in await self._all("list_runs", params)]

    async def run(
        self, name: str, tenant: str = DEFAULT_TENANT, *, slot: datetime | None = None
    ) -> Run:
        """One run of the job with its output: the run of ``slot``, else the newest (an
        attempt in flight is ``running``, its output not written yet); ``NotFound`` if none."""
        params = {"job_name": name, "tenant_id": tenant, "slot": slot}
        row = await self._one("show_run", params)
        if row is None:
            which = f"of slot {slot.isoformat()} " if slot is not None else ""
            raise NotFound(f"no run {which}of job {name!r} in tenant {tenant!r}")
        return Run.from_row(row)

    # -- helpers ----------------------------------------------------------------------

    @staticmethod
    def _spec_of(job: Job) -> JobSpec:
        return JobSpec(
            name=job.name,
            schedule=job.schedule,
            handler=job.handler,
            tenant=job.tenant,
            tz=job.tz,
            dst_repeated=job.dst_repeated,
            dst_skipped=job.dst_skipped,
        )

    def _params(self, spec: JobSpec, shards: int, db_now: datetime) -> dict[str, Any]:
        job_id = uuid.uuid4()
        schedule = spec.parsed_schedule()
        slot = schedule.at or schedule.next_after(db_now)  # @at: its one slot, even if past
        return {
            "id": job_id,
            "tenant_id": spec.tenant,
            "name": spec.name,
            "schedule": spec.schedule,
            "tz": spec.tz,
            "dst_repeated": spec.dst_repeated,
            "dst_skipped": spec.dst_skipped,
            "handler": spec.handler,
            "payload": Jsonb(spec.payload),
            "paused": spec.paused,
            "shard_id": shard_for(job_id, shards),
            "next_run_at": jittered(spec.tenant, spec.name, slot, spec.jitter_s),
            "slot_at": slot,
            "catch_up": spec.catch_up,
            "grace_s": spec.grace_s,
            "max_backfill": spec.max_backfill,
            "timeout_s": spec.timeout_s,
            "max_retries": spec.retries,
            "retry_backoff_s": spec.retry_backoff_s,
            "keep_for_s": spec.keep_for_s,
            "keep_runs": spec.keep_runs,
            "output_limit": spec.output_limit,
            "late_after_s": spec.late_after_s,
            "pause_after_failures": spec.pause_after_failures,
            "overlap": spec.overlap,
            "max_concurrent": spec.max_concurrent,
            "cancel_grace_s": spec.cancel_grace_s,
            "jitter_s": spec.jitter_s,
            "remove_when_done": spec.remove_when_done,
        }

    async def _place(self, spec: JobSpec, shards: int, next_run_at: datetime) -> int | None:
        """Move the job to the shard of its zone set, back to the default shards, or park
        it as an each-zone parent (docs/design/zones.md).

        Returns the new shard if the job moved, None if it was already in place. Separate
        statements from ``upsert_job``, in the same transaction: nobody sees the job in
        the wrong shard."""
        job = await self._one("get_job", {"tenant_id": spec.tenant, "name": spec.name})
        assert job is not None
        key = {"tenant_id": spec.tenant, "name": spec.name}
        zones = list(spec.zones) or None
        if spec.each_zone:
            parked = {**key, "zones": zones, "shard_id": PARKED_SHARD}
            return None if await self._one("park_each_zone", parked) is None else PARKED_SHARD
        if job.get("each_zone"):
            await self._one("unpark_each_zone", {**key, "next_run_at": next_run_at})
        elif tuple(job.get("zones") or ()) == spec.zones and (
            spec.zones or job["shard_id"] < ZONE_SHARD_BASE
        ):
            return None
        if spec.zones:
            space = await self._zone_space(spec.zones)
            shard = zone_shard_for(job["id"], space)
        else:
            shard = shard_for(job["id"], shards)
        moved = await self._one("set_job_zones", {**key, "zones": zones, "shard_id": shard})
        return None if moved is None else shard

    async def _zone_space(self, zones: tuple[str, ...]) -> int:
        while True:  # no row: a concurrent first use of the set, committed by now
            found = await self._one("zone_space", {"zones": list(zones)})
            if found is not None:
                return int(found["space"])

    async def _notify(self, shard: int) -> None:
        await self._conn.execute(
            query("notify"), {"channel": self.settings.wake_channel, "payload": str(shard)}
        )

    async def _write(self, name: str, job: str, tenant: str, extra: dict[str, Any]) -> None:
        row = await self._one(name, {"tenant_id": tenant, "name": job, **extra})
        if row is None:
            raise NotFound(f"no job named {job!r} in tenant {tenant!r}")
        await self._notify(row["shard_id"])

    async def _one(self, name: str, params: dict[str, Any]) -> dict[str, Any] | None:
        params = {"scope": self.scope, **params}
        check_params(params)
        try:
            cur = await self._conn.execute(query(name), params)
            return await cur.fetchone()
        except psycopg.errors.UndefinedTable as exc:
            raise StoreError("the schema is not initialised; run `pulse init` first") from exc
        except psycopg.Error as exc:
            raise StoreError(describe(exc)) from exc

    async def _all(self, name: str, params: dict[str, Any]) -> list[dict[str, Any]]:
        params = {"scope": self.scope, **params}
        check_params(params)
        try:
            cur = await self._conn.execute(query(name), params)
            return await cur.fetchall()
        except psycopg.errors.UndefinedTable as exc:
            raise StoreError("the schema is not initialised; run `pulse init` first") from exc
        except psycopg.Error as exc:
            raise StoreError(describe(exc)) from exc
