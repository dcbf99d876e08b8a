"""One chaos run from start to verdict.

Plan the faults (bad options fail before anything starts), start the servers (or use the
configured ones with ``--external``; a pg_auto_failover formation with ``--pg-ha``, Redis
Sentinel with a ``redis-failover`` fault), create the schema and the workload, start one proxy
pair and one node per node id, wait until every shard is held, inject the faults while
sampling the shard locks, let the cluster settle for the quiet period, kill the nodes, and
check what the runs table, the witness file, the effect jobs' ledger, `pulse audit` over the
window and the node logs say.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
import shutil
import signal
import tempfile
import time
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path

from cluster.chaos import poison, probes
from cluster.chaos.fleet import Fleet, FleetConfig, NodeProcess, endpoint, node_ids
from cluster.chaos.inject import Injector
from cluster.chaos.plan import Bounds, Fault, make_plan
from cluster.chaos.servers.pgha import PgFormation
from cluster.chaos.servers.proxy import Proxy
from cluster.chaos.servers.sentinel import SentinelSet
from cluster.chaos.servers.standalone import PostgresServer, RedisServer, ServerError
from cluster.chaos.verdict.observations import Execution, JobInfo, Observations, to_json
from cluster.chaos.verdict.report import Report, build_report
from cluster.chaos.witness import read_witness
from cluster.chaos.workload import KEY, KEY_LIMIT, JobDef, make_workload
from cluster.errors import InvalidInput, PulseError
from cluster.settings import ClusterSettings
from cluster.store.jobstore.store import JobStore
from cluster.urls import SENTINEL_SCHEME, is_multi_host

logger = logging.getLogger(__name__)

READY_TIMEOUT_S = 60.0
WINDOW_MARGIN_S = 2.0
# After the quiet period, how long jobs that backfill a backlog get to finish the slots of
# the window before the nodes are killed.
CATCH_UP_TIMEOUT_S = 60.0


@dataclass(frozen=True)
class ChaosOptions:
    seed: int
    faults: tuple[str, ...]
    nodes: int = 5
    zones: int = 3
    duration_s: float = 240.0
    quiet_s: float = 20.0
    jobs: int = 300
    shards: int = 64
    session_timeout_s: float = 10.0
    kill_bound_s: float = 5.0
    stop_bound_s: float | None = None  # default: session timeout + kill bound
    external: bool = False
    pg_ha: bool = False  # a pg_auto_failover formation instead of one Postgres server
    pg_async: bool = False  # ... with asynchronous replication (it can lose commits)
    workdir: Path | None = None
    keep: bool = False

    @property
    def sentinel(self) -> bool:
        """Redis behind Sentinel (a primary and a replica) instead of one server."""
        return "redis-failover" in self.faults

    @property
    def bounds(self) -> Bounds:
        stop = self.stop_bound_s
        if stop is None:
            stop = self.session_timeout_s + self.kill_bound_s
        return Bounds(self.kill_bound_s, stop, self.session_timeout_s)

    def summary(self) -> dict[str, object]:
        return {
            "seed": self.seed,
            "nodes": self.nodes,
            "zones": self.zones,
            "jobs": self.jobs,
            "shards": self.shards,
            "duration_s": self.duration_s,
            "quiet_s": self.quiet_s,
            "session_timeout_s": self.session_timeout_s,
            "kill_bound_s": self.bounds.kill_s,
            "stop_bound_s": self.bounds.stop_s,
            "stall_bound_s": self.bounds.stall_s,
            "faults": list(self.faults),
            "external": self.external,
            "pg_ha": self.pg_ha,
            "pg_async": self.pg_async,
            "redis_sentinel": self.sentinel,
        }


def plan_for(options: ChaosOptions) -> list[Fault]:
    """The fault plan; raises InvalidInput for options that cannot work."""
    nodes = dict(node_ids(options.nodes, options.zones))
    return make_plan(options.faults, nodes, options.duration_s, options.seed, options.bounds)


def _check_proxiable(settings: ClusterSettings) -> None:
    """``--external`` puts a proxy per node in front of each store: one server each."""
    if is_multi_host(settings.database_url):
        raise InvalidInput("database_url", "--external needs one Postgres host, not a host list")
    if settings.redis_url.startswith(SENTINEL_SCHEME + "://"):
        raise InvalidInput("redis_url", "--external needs one Redis server, not a Sentinel URL")


class ChaosRun:
    def __init__(self, options: ChaosOptions, external: ClusterSettings | None) -> None:
        self.options = options
        self.plan = plan_for(options)
        self.workdir = options.workdir or Path(tempfile.mkdtemp(prefix="pulse-chaos-"))
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.witness = self.workdir / "witness.jsonl"
        if external is not None:
            _check_proxiable(external)
        self._external = external
        self._postgres: PostgresServer | None = None
        self._redis: RedisServer | None = None
        self._formation: PgFormation | None = None
        self._sentinels: SentinelSet | None = None
        self._proxies: list[Proxy] = []
        self._settings: ClusterSettings | None = None

    async def run(self) -> Report:
        """The whole run; SIGTERM (like Ctrl-C) cancels it and everything is cleaned up."""
        task = asyncio.current_task()
        if task is not None:
            asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, task.cancel)
        try:
            self._settings = await self._servers()
            return await self._run(self._settings)
        finally:
            if self._external is not None and self._settings is not None:
                with contextlib.suppress(PulseError, OSError):
                    await probes.drop_cluster(self._settings)
            for proxy in self._proxies:
                await proxy.close()
            for server in (self._postgres, self._redis):
                if server is not None:
                    await server.close()
            for ha in (self._formation, self._sentinels):
                if ha is not None:
                    await asyncio.to_thread(ha.close)

    async def _servers(self) -> ClusterSettings:
        if self._external is not None:
            tag = secrets.token_hex(3)
            return replace(self._external, schema=f"chaos_{tag}", cluster=f"chaos-{tag}")
        if self.options.pg_ha:
            # Blocking (pg_autoctl, maybe apt-get): off the loop.
            self._formation = await asyncio.to_thread(
                lambda: PgFormation(self.workdir, synchronous=not self.options.pg_async)
            )
            await asyncio.to_thread(self._formation.start)
            database_url = self._formation.url
        else:
            self._postgres = PostgresServer(self.workdir / "postgres.log")
            await self._postgres.start()
            database_url = self._postgres.url
        if self.options.sentinel:
            self._sentinels = await asyncio.to_thread(SentinelSet, self.workdir)
            await asyncio.to_thread(self._sentinels.start)
            redis_url = self._sentinels.url
        else:
            self._redis = RedisServer(self.workdir / "redis.log")
            await self._redis.start()
            redis_url = self._redis.url
        return ClusterSettings(database_url, redis_url, "pulse", "chaos")

    async def _load(self, settings: ClusterSettings, workload: list[JobDef]) -> None:
        specs = [job.spec() for job in workload]
        if "poison-job" in self.options.faults:
            specs.append(poison.spec())  # paused: each poison-job fault triggers it once
        async with JobStore.open(settings, probes.APP_NAME) as store:
            await store.init(self.options.shards)
            await store.limits.set(
                KEY, max_concurrent=KEY_LIMIT
            )  # the keyed jobs' (docs/limits.md)
            await store.definitions.apply(specs)
        await probes.create_ledger(settings)

    async def _fleet(self, settings: ClusterSettings) -> Fleet:
        o = self.options
        nodes = []
        for node_id, zone in node_ids(o.nodes, o.zones):
            pg = (
                None if o.pg_ha else await self._proxy(f"{node_id}-pg", settings.database_url, 5432)
            )
            redis = (
                None
                if o.sentinel
                else await self._proxy(f"{node_id}-redis", settings.redis_url, 6379)
            )
            nodes.append(NodeProcess(node_id, zone, pg, redis))
        config = FleetConfig(
            settings=settings,
            workdir=self.workdir,
            witness_file=self.witness,
            session_timeout_s=o.session_timeout_s,
            # Ample execution slots: backpressure would blur the failover measurements.
            extra_args=("--drain-timeout", "5s", "--concurrency", "64"),
        )
        return Fleet(config, nodes)

    async def _proxy(self, name: str, url: str, default_port: int) -> Proxy:
        proxy = Proxy(name, endpoint(url, default_port))
        await proxy.start()
        self._proxies.append(proxy)
        return proxy

    async def _wait_ready(self, sampler: probes.LockSampler) -> None:
        deadline = time.monotonic() + READY_TIMEOUT_S
        while time.monotonic() < deadline:
            last = sampler.samples[-1].holders if sampler.samples else None
            if last is not None and set(range(self.options.shards)) <= set(last):
                return
            await asyncio.sleep(0.2)
        raise ServerError(f"the nodes did not hold every shard within {READY_TIMEOUT_S:g}s")

    async def _run(self, settings: ClusterSettings) -> Report:
        o = self.options
        fleet_zones = dict(node_ids(o.nodes, o.zones))
        workload = make_workload(o.jobs, o.seed, sorted(set(fleet_zones.values())))
        await self._load(settings, workload)
        offset = await probes.clock_offset(settings)
        fleet = await self._fleet(settings)
        sampler = probes.LockSampler(settings)
        stop = asyncio.Event()
        background = [asyncio.create_task(sampler.run(stop))]
        try:
            for node in fleet:
                await fleet.start(node)
            await self._wait_ready(sampler)
            phase_mono, phase_start = time.monotonic(), time.time()
            logger.info("all %d shards held; faults begin", o.shards, extra={"event": "ready"})
            background.append(asyncio.create_task(fleet.watch(stop, phase_start)))
            injector = Injector(
                fleet,
                self._postgres,
                self._redis,
                lambda node: probes.terminate_backends(settings, node),
                settings,
                formation=self._formation,
                sentinels=self._sentinels,
            )
            await injector.run(self.plan, phase_mono)
            await asyncio.sleep(max(0.0, phase_mono + o.duration_s - time.monotonic()))
            phase_end = time.time()
            logger.info("faults over; quiet for %gs", o.quiet_s, extra={"event": "quiet"})
            await asyncio.sleep(o.quiet_s)
            window_end = datetime.fromtimestamp(phase_end - WINDOW_MARGIN_S + offset, UTC)
            behind = await probes.wait_caught_up(settings, window_end, CATCH_UP_TIMEOUT_S)
            if behind:
                logger.warning(
                    "%d jobs still behind the window %gs after the quiet period",
                    behind,
                    CATCH_UP_TIMEOUT_S,
                    extra={"event": "behind"},
                )
        finally:
            stop.set()
            await fleet.kill_all()
            await asyncio.gather(*background, return_exceptions=True)
        shards, runs = await probes.collect(settings, offset)
        audit_counts, audit_findings = await probes.audit_window(
            settings,
            datetime.fromtimestamp(phase_start + WINDOW_MARGIN_S + offset, UTC),
            window_end,
        )
        obs = Observations(
            jobs={
                j.name: JobInfo(
                    j.name,
                    j.interval_s,
                    j.catch_up,
                    j.sleep_s,
                    shards[j.name],
                    j.kind,
                    max_concurrent=j.max_concurrent,
                    zones=j.zones,
                    after=j.after,
                    chained=j.chained,
                    uses=j.uses,
                    grace_s=j.grace_s,
                )
                for j in workload
            },
            runs=runs,
            executions=[Execution.witnessed(line) for line in read_witness(self.witness)],
            samples=sampler.samples,
            faults=injector.records,
            shards=o.shards,
            window_start=phase_start + WINDOW_MARGIN_S,
            window_end=phase_end - WINDOW_MARGIN_S,
            phase_start=phase_start,
            phase_end=phase_end,
            kill_bound_s=o.bounds.kill_s,
            clock_offset_s=offset,
            log_events=fleet.log_events(),
            node_exits=tuple(fleet.exits),
            poison_job=poison.JOB if "poison-job" in o.faults else None,
            poison_retries=poison.RETRIES,
            ledger=await probes.collect_ledger(settings),
            async_replication=o.pg_async,
            node_zones=fleet_zones,
            keys={KEY: KEY_LIMIT},
            audit_counts=audit_counts,
            audit_findings=audit_findings,
        )
        report = build_report(obs, o.summary())
        (self.workdir / "observations.json").write_text(to_json(obs), "utf-8")
        return report

    def cleanup(self, report: Report | None) -> bool:
        """Remove the work folder unless asked to keep it or the run failed; True if kept."""
        if self.options.keep or self.options.workdir or report is None or not report.passed:
            return True
        shutil.rmtree(self.workdir, ignore_errors=True)
        return False
