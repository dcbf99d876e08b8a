"""The job store: Pulse's Python API for creating and managing jobs at run time.

``JobStore`` wraps one admin connection. Every write validates first (``JobSpec``), runs in
one transaction, and wakes the claim loops of the job's shard with ``NOTIFY``. The CLI is a
thin layer over this class.

This module owns the cluster's settings and pruning, and what acts on jobs that exist
(pause, resume, trigger, remove, and the lists of jobs and runs). Its parts hold the rest,
on the store's scoped connection (``cluster.store.jobstore.scoped``): creating and placing
job rows (``definitions``), steering running slots (``runcontrol``), runs with inputs
(``inputs``), their history (``revisions``), tokens and audit (``access``), paged reads
(``pages``), tenant limits (``tenants``), named limits (``limits``) and quotas
(``quotas``), console sessions (``sessions``), the handlers registries offer the API
(``handlers``), watch jobs' pings (``watch``) and what ``pulse jobs show`` reads of one job
(``shown``). Callers use a part's methods through the part; the store restates none of
them but ``details`` and ``explain``, which the public API had on the store before
``shown`` held them (tests/unit/test_public_api.py).

    async with JobStore.open(ClusterSettings.from_env()) as store:
        await store.definitions.add(JobSpec.build("rollup", "0 * * * *", "billing.jobs:rollup"))
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from datetime import datetime
from typing import Any

from psycopg.types.json import Jsonb

from cluster.config.retention import Retention
from cluster.errors import Conflict, InvalidInput, NotFound
from cluster.jobs.fields import DEFAULT_TENANT, check_text
from cluster.jobs.models import Job, JobStatus, Run
from cluster.settings import ClusterSettings
from cluster.store import config as cluster_config
from cluster.store.access.console_sessions import ConsoleSessions
from cluster.store.access.tokens import Access
from cluster.store.connect import ADMIN_STATEMENT_TIMEOUT_S, Conn, Row, connect
from cluster.store.housekeeping import pruning
from cluster.store.housekeeping.pruning import PruneResult
from cluster.store.jobstore.calendar_rule import Rules
from cluster.store.jobstore.calendars import Calendars
from cluster.store.jobstore.children import Children
from cluster.store.jobstore.definitions import Definitions
from cluster.store.jobstore.holds import Holds
from cluster.store.jobstore.inputs import Inputs
from cluster.store.jobstore.named_limits import NamedLimits
from cluster.store.jobstore.pages import Pages
from cluster.store.jobstore.plans import Plans
from cluster.store.jobstore.quotas import Quotas
from cluster.store.jobstore.registered_handlers import RegisteredHandlers
from cluster.store.jobstore.revisions import Revisions
from cluster.store.jobstore.runcontrol import RunControl
from cluster.store.jobstore.scoped import ScopedConnection
from cluster.store.jobstore.shown import Shown
from cluster.store.jobstore.specs import MAX_NOTE_LENGTH
from cluster.store.jobstore.tenant_limits import Tenants
from cluster.store.jobstore.watch import Watch
from cluster.store.jobstore.windows import Windows
from cluster.store.schema.migrate import InitResult, migrate
from cluster.timing.calendared import jittered_start
from cluster.timing.schedule import CHAINED_NEXT, ENDED
from cluster.timing.timeline import Step


class JobStore:
    """``scope``: the one tenant this store reads and changes (an API token's), else all;
    every statement on a job filters by it (``%(scope)s`` in sql/jobs.sql)."""

    def __init__(self, conn: Conn, settings: ClusterSettings, *, scope: str | None = None) -> None:
        self.db = ScopedConnection(conn, settings, scope)
        self.settings = settings
        self.scope = scope
        self.rules = Rules(self.db)
        self.calendars = Calendars(self.db, self.rules)
        self.windows = Windows(self.db, self.rules)
        self.holds = Holds(self.db)
        self.definitions = Definitions(self.db, self.rules)
        self.revisions = Revisions(self.db, self.definitions)
        self.plans = Plans(self.db, self.definitions)
        self.runcontrol = RunControl(self.db)
        self.inputs = Inputs(self.db)
        self.access = Access(conn)
        self.pages = Pages(conn, scope)
        self.tenants = Tenants(conn)
        self.limits = NamedLimits(conn)
        self.handlers = RegisteredHandlers(conn)
        self.sessions = ConsoleSessions(conn)
        self.quotas = Quotas(conn)
        self.watch = Watch(self.db)
        self.shown = Shown(self.db, self.limits)

    @asynccontextmanager
    async def transaction(self) -> AsyncIterator[None]:
        """One transaction around several calls (a change and its audit row)."""
        async with self.db.transaction():
            yield

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
        result = await migrate(self.db.conn, self.settings.schema, shards)
        self.db.fix_shard_count(result.shards)
        await cluster_config.seed_config(self.db.conn, Retention().to_config())
        return result

    async def config(self) -> list[tuple[str, str, datetime]]:
        """The cluster's stored settings (``pulse config show``): (key, value, updated_at)."""
        return await cluster_config.config_rows(self.db.conn)

    async def config_values(self) -> dict[str, str]:
        """The stored settings as {key: value}."""
        return await cluster_config.read_config(self.db.conn)

    async def set_config(self, key: str, value: str) -> str:
        """Set a cluster setting (``pulse config set``); returns the value as stored.
        ``InvalidInput`` naming the key, with nothing written, if the key or value is bad."""
        return await cluster_config.write_config(self.db.conn, key, value)

    async def prune(self, *, dry_run: bool = False, now: datetime | None = None) -> PruneResult:
        """Delete (or count) the expired runs of every shard and the alert events done
        with, in small batches (``pulse runs prune``), on a connection of its own."""
        retention = Retention.from_config(await cluster_config.read_config(self.db.conn))
        shards = range(await self.shard_count())
        side = pruning.side_connection(
            self.settings, "pulse-admin/prune", statement_timeout_s=ADMIN_STATEMENT_TIMEOUT_S
        )
        async with side.using():
            return await pruning.prune(side, retention, shards, now=now, dry_run=dry_run)

    async def shard_count(self) -> int:
        return await self.db.shard_count()

    async def db_now(self, now: datetime | None = None) -> datetime:
        return await self.db.db_now(now)

    # -- jobs that exist ----------------------------------------------------------------

    async def pause(
        self,
        name: str,
        tenant: str = DEFAULT_TENANT,
        *,
        note: str | None = None,
        now: datetime | None = None,
    ) -> Job:
        """Stop claiming the job; ``note`` says why (shown by list, show and status). The
        slots it owes already (held at its gate, due) are recorded skipped."""
        if note is not None:
            note = check_text(note, "note").strip()[:MAX_NOTE_LENGTH] or None
        async with self.db.transaction():
            job = await self.db.job("lock_job", name, tenant)
            await self.holds.refuse_child(job, "pause")
            db_now = await self.db_now(now)
            for paused in [job, *await self.holds.children_of(job)]:  # an each-zone job's too
                await self.holds.record_owed(paused, "pause", db_now)
                await self._write("pause_job", paused.name, tenant, {"note": note})
        return await self.get(name, tenant)

    async def resume(
        self, name: str, tenant: str = DEFAULT_TENANT, *, now: datetime | None = None
    ) -> Job:
        """Unpause; the job continues at its next future slot. A job whose ``pause --until``
        is over is on its schedule again: it keeps its slot (held at its gate, or due)."""
        async with self.db.transaction():
            job = await self.db.job("lock_job", name, tenant)
            await self.holds.refuse_child(job, "resume")
            db_now = await self.db_now(now)
            for resumed in [job, *await self.holds.children_of(job)]:  # an each-zone job's too
                if resumed.each_zone:  # its children run its slots: it stays never due
                    slot, start = resumed.slot_at, ENDED
                elif resumed.parsed_schedule().chain:  # its slot taken, or the next released
                    slot = resumed.slot_at
                    start = slot if slot < CHAINED_NEXT else CHAINED_NEXT
                else:
                    run = await self.holds.first_open_run(resumed, db_now, db_now)
                    start = jittered_start(run, tenant, resumed.name, resumed.jitter_s)
                    slot = run.slot
                params = {"next_run_at": start, "slot_at": slot, "now": db_now}
                await self._write("resume_job", resumed.name, tenant, params)
        return await self.get(name, tenant)

    async def trigger(
        self, name: str, tenant: str = DEFAULT_TENANT, *, now: datetime | None = None
    ) -> Job:
        """Make the job due now without changing its regular schedule (with a payload or a
        past slot: ``inputs.trigger``). A job with upstreams gets an extra run now, stamped
        with the current time, that waits for none of them: its own slot (held, or a chained
        job's queue) stays as it is (docs/design/gates.md); so does a job planned past slots
        skip-next recorded (``Holds.records_ahead``), one paused until a time to come,
        whose run after the trigger's would otherwise be its next slot after now, and a done
        one, which stays done (its slot is the one it stopped at, long past), but for an
        every-node one, whose flight would run on one node."""
        job = await self.get(name, tenant)
        if job.watch:
            raise InvalidInput("name", f"{name!r} is a watch job: no node runs it")
        if (
            job.each_zone  # refused there: its children run its slots, one per zone
            or await self.has_upstreams(name, tenant)
            or await self.holds.records_ahead(job, now)
            or (job.paused_until is not None and job.paused_until > await self.db.db_now(now))
            or (job.status == JobStatus.DONE and not job.each_node)
        ):
            await self.inputs.trigger(name, tenant, now=now)
            return await self.get(name, tenant)
        row = await self.db.one("trigger_job", {"tenant_id": tenant, "name": name, "now": now})
        if row is None:
            job = await self.get(name, tenant)  # raises NotFound
            raise Conflict("name", f"{job.name!r} is running now; trigger it when it ends")
        await self.db.notify(row["shard_id"])
        return await self.get(name, tenant)

    async def has_upstreams(self, name: str, tenant: str = DEFAULT_TENANT) -> bool:
        """Whether the job waits for other jobs (``--after`` or ``@after:``)."""
        row = await self.db.one("get_job", {"tenant_id": tenant, "name": name})
        return row is not None and bool(row["gated"])

    async def remove(
        self, name: str, tenant: str = DEFAULT_TENANT, *, cascade: bool = False
    ) -> list[str]:
        """Delete the job and its run history; the names removed, the job last. A job others
        wait for (``--after``, ``@after:``) is refused (``Conflict``, nothing written) unless
        ``cascade``, which removes them too, each before the jobs it waits for. An each-zone
        job's children go with it (``Children.release``)."""
        async with self.db.transaction():
            job = await self.db.job("get_job", name, tenant)
            found = await self.db.all("gate_downstreams", {"id": job.id})
            downstreams = [r["name"] for r in found]
            if downstreams and not cascade:
                direct = sorted(r["name"] for r in found if r["direct"])
                many = len(direct) > 1
                through = len(downstreams) - len(direct)
                raise Conflict(
                    "name",
                    f"{', '.join(direct)} wait{'' if many else 's'} for {name!r}"
                    + (f" ({through} more through {'them' if many else 'it'})" if through else "")
                    + f": change or remove {'them' if many else 'it'} first, or remove "
                    f"{'all' if downstreams[1:] else 'both'} with --cascade",
                )
            parents = []
            for doomed in [*downstreams, job.name]:
                row = await self._write("remove_job", doomed, tenant, {})
                if row["each_zone"]:
                    parents.append(row["id"])
            await Children(self.db).release(parents)
        return [*downstreams, job.name]

    # -- reads ------------------------------------------------------------------------

    async def get(self, name: str, tenant: str = DEFAULT_TENANT) -> Job:
        return await self.db.job("get_job", name, tenant)

    async def details(
        self,
        name: str,
        tenant: str = DEFAULT_TENANT,
        *,
        slots: int = 5,
        runs: int = 5,
        now: datetime | None = None,
    ) -> dict[str, Any]:
        """What ``pulse jobs show --json`` prints (``Shown.details``)."""
        return await self.shown.details(name, tenant, slots=slots, runs=runs, now=now)

    async def explain(
        self,
        name: str,
        tenant: str = DEFAULT_TENANT,
        *,
        after: datetime | None = None,
        count: int = 10,
        now: datetime | None = None,
    ) -> tuple[Job, list[Step]]:
        """``pulse jobs show --explain`` (``Shown.explain``)."""
        return await self.shown.explain(name, tenant, after=after, count=count, now=now)

    async def graph(self, tenant: str = DEFAULT_TENANT) -> list[dict[str, str]]:
        """Every edge of ``tenant``: upstream, downstream, match rule."""
        return [dict(r) for r in await self.db.all("gate_graph", {"tenant_id": tenant})]

    async def jobs(
        self, tenant: str | None = None, labels: Mapping[str, str] | None = None
    ) -> list[Job]:
        """The jobs (of ``tenant``), those with every one of ``labels`` only."""
        found = Jsonb(dict(labels)) if labels else None
        rows = await self.db.all("list_jobs", {"tenant_id": tenant, "labels": found})
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
        return [Run.from_row(r) for r in await self.db.all("list_runs", params)]

    async def run(
        self, name: str, tenant: str = DEFAULT_TENANT, *, slot: datetime | None = None
    ) -> Run:
        """One run of the job with its output: the run of ``slot``, else the newest (an
        attempt in flight is ``running``, its output not written yet); ``NotFound`` if none."""
        params = {"job_name": name, "tenant_id": tenant, "slot": slot}
        row = await self.db.one("show_run", params)
        if row is None:
            which = f"of slot {slot.isoformat()} " if slot is not None else ""
            raise NotFound(f"no run {which}of job {name!r} in tenant {tenant!r}")
        return Run.from_row(row)

    # -- helpers ----------------------------------------------------------------------

    async def _write(self, name: str, job: str, tenant: str, extra: dict[str, Any]) -> Row:
        row = await self.db.one(name, {"tenant_id": tenant, "name": job, **extra})
        if row is None:
            raise NotFound(f"no job named {job!r} in tenant {tenant!r}")
        await self.db.notify(row["shard_id"])
        return row
