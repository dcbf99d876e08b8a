"""A running node: its lifecycle. Has its services wired (``node.parts``), starts them,
supervises them, and hands over to ``node.shutdown`` when stopped.

Startup: open the lock session (refusing settings that break the guarantees), create the
missing jobs of ``--sync-jobs`` (``Definitions.sync``), take back runs an earlier process of
this node left, register the heartbeat, then run heartbeat, membership watch, shard
keeper, death watch, claim loop, recovery, NOTIFY listener, lease renewal, completer,
pruner, alert delivery and late pass. SIGTERM/SIGINT drains (``node.shutdown``) and exits
0; a second signal exits at once; a vital service that crashes drains and exits 1.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
from collections.abc import Coroutine, Sequence
from typing import Any

from cluster.errors import ConfigError, MembershipError, StoreError
from cluster.jobs.spec import JobSpec
from cluster.members import MemberRegistry
from cluster.settings import ClusterSettings, NodeSettings, mask_url
from cluster.store.lock.session import LockSession
from node import heap
from node.maintenance.backfiller import BACKFILL_POLL_S, Backfiller
from node.maintenance.gatepass import INTERVAL_S as GATE_INTERVAL_S
from node.maintenance.jobsync import sync_jobs
from node.maintenance.lateness import INTERVAL_S as LATE_INTERVAL_S
from node.maintenance.outbox import INTERVAL_S as ALERT_INTERVAL_S
from node.maintenance.recovery import Recovery
from node.membership.deathwatch import DeathWatch
from node.membership.heartbeat import Heartbeat
from node.metrics import serve_metrics
from node.parts import Parts, wire
from node.pipeline.executor import Executor
from node.service import Failures, Signal, run_service, wait_any
from node.shutdown import Services
from node.state import NodeState
from node.stats import Stats

logger = logging.getLogger(__name__)

RECOVERY_INTERVAL_S = 2.0
LISTENER_RETRY_S = 0.5


class Node:
    def __init__(
        self,
        cluster: ClusterSettings,
        settings: NodeSettings,
        sync_specs: Sequence[JobSpec] = (),
        sync_handlers: Sequence[tuple[str, str]] = (),
    ) -> None:
        self.cluster = cluster
        self.settings = settings
        self.sync_specs = list(sync_specs)
        self.sync_handlers = list(sync_handlers)  # (tenant, handler) offered to the API
        self.started = asyncio.Event()  # set once every service runs
        self.parts: Parts | None = None
        self.stats = Stats()
        self.stop = Signal()
        self._signals = 0
        self._owns_process = False  # run with signals: the process is the node's
        self._crashed = False
        self.state: NodeState | None = None

    def request_stop(self) -> None:
        self._signals += 1
        if self._signals > 1:
            logger.warning("second signal: exiting now", extra={"event": "forced_exit"})
            logging.shutdown()
            os._exit(1)
        logger.info("stop requested: draining", extra={"event": "drain_started"})
        self.stop.set()

    def _session_lost(self) -> None:
        if self.state is not None:
            self.stats.locks_lost += self.state.session_untrusted()

    def _install_signals(self) -> None:
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, self.request_stop)

    async def _open_session(self, session: LockSession) -> int:
        failures = Failures("postgres connection")
        while True:
            try:
                shards = await session.open(self.settings.shards)
                failures.succeeded()
                return shards
            except ConfigError:
                raise
            except StoreError as exc:
                self.stats.db_errors += 1
                failures.failed(exc)
                await wait_any(failures.backoff_s(0.5, 5.0), self.stop)
                if self.stop.is_set():
                    raise

    def _log_start(self) -> None:
        s = self.settings
        logger.info(
            "node starting: database=%s redis=%s schema=%s cluster=%s zone=%s concurrency=%d "
            "poll=%gs session_timeout=%gs lease=%gs heartbeat=%gs/%gs drain=%gs",
            mask_url(self.cluster.database_url),
            mask_url(self.cluster.redis_url),
            self.cluster.schema,
            self.cluster.cluster,
            s.zone,
            s.concurrency,
            s.poll_interval_s,
            s.session_timeout_s,
            s.lease_s,
            s.heartbeat_interval_s,
            s.heartbeat_ttl_s,
            s.drain_timeout_s,
            extra={"event": "node_starting"},
        )

    async def run(self, *, signals: bool = True) -> int:
        """Run until stopped; returns the process exit code. With ``signals`` the process
        is the node's (``pulse node``): it stops on SIGTERM and its start-up heap is frozen
        (``node.heap``). Without, the caller stops the node (``stop.set()``): an application
        hosting it keeps its own signals and heap."""
        self._owns_process = signals
        if signals:
            self._install_signals()
        self._log_start()
        s = self.settings
        session = LockSession(
            self.cluster,
            s.node_id,
            s.zone,
            session_timeout_s=s.session_timeout_s,
            statement_timeout_s=s.statement_timeout_s,
            on_lost=self._session_lost,
        )
        try:
            shard_count = await self._open_session(session)
        except ConfigError as exc:
            logger.error("refusing to start: %s", exc, extra={"event": "config_error"})
            return 2
        except StoreError:
            return 0  # stopped before Postgres ever answered
        if not await sync_jobs(self.cluster, s.node_id, self.sync_specs, self.sync_handlers):
            await session.close()
            return 2
        registry = MemberRegistry(self.cluster, timeout_s=s.redis_timeout_s)
        try:
            return await self._serve(session, registry, shard_count)
        finally:
            await session.close()
            await registry.close()

    async def _serve(self, session: LockSession, registry: MemberRegistry, shard_count: int) -> int:
        parts = self.parts = wire(
            self.cluster, self.settings, self.stats, session, registry, shard_count
        )
        self.state = parts.state
        if self.settings.metrics_port is not None:
            self._serve_metrics(self.settings.metrics_port, parts.executor)
        await self._recover_own(parts.recovery)
        await self._first_heartbeat(parts.heartbeat)
        services = self._start(parts)
        self.started.set()
        if self._owns_process:
            frozen = heap.settle()
            logger.info(
                "heap settled: %d start-up objects out of the cycle collector's walk",
                frozen,
                extra={"event": "heap_settled"},
            )
        await self.stop.wait()
        await parts.shutdown.run(services)
        await parts.alerts.close()
        await parts.gates.close()
        await parts.executor.forwarders.close()
        if parts.executor.tracing is not None:  # export the spans still queued
            await asyncio.to_thread(parts.executor.tracing.shutdown)
        await parts.config.close()
        logger.info("node stopped", extra={"event": "node_stopped"})
        return 1 if self._crashed else 0

    def _serve_metrics(self, port: int, executor: Executor) -> None:
        serve_metrics(
            port,
            self.stats,
            lambda: self.state,
            lambda: len(executor.running),
            self.settings.metrics_bind,
        )

    async def _recover_own(self, recovery: Recovery) -> None:
        """Before this process claims anything (see ``Recovery.recover_own``)."""
        try:
            await recovery.recover_own()
        except StoreError as exc:
            logger.warning("runs of a previous process of this node wait for their leases: %s", exc)

    async def _first_heartbeat(self, heartbeat: Heartbeat) -> None:
        try:
            await heartbeat.run_once()
        except MembershipError as exc:
            logger.warning("Redis unavailable at start: %s", exc)

    def _start(self, p: Parts) -> Services:
        s = self.settings
        claiming, writing = p.stop_claiming, p.stop_writing
        heartbeat = self._spawn(
            run_service(
                "heartbeat",
                p.heartbeat.run_once,
                interval_s=s.heartbeat_interval_s,
                stop=claiming,
                wake=p.state.membership,
            )
        )
        subscription = self._spawn(p.heartbeat.watch(claiming))
        lockers = [
            self._spawn(
                run_service(
                    "shard locks",
                    p.keeper.run_once,
                    interval_s=s.heartbeat_interval_s,
                    stop=claiming,
                    wake=p.state.rebalance,
                    # A blipped session must be back within the peers' grace.
                    backoff_cap_s=0.25,
                )
            ),
            self._spawn(p.claimer.run(claiming)),
            self._spawn(
                run_service(
                    "recovery", p.recovery.poll, interval_s=RECOVERY_INTERVAL_S, stop=claiming
                )
            ),
        ]
        listener = self._spawn(
            run_service(
                "wake-up listener",
                p.listener.run_once,
                interval_s=LISTENER_RETRY_S,
                stop=claiming,
            )
        )
        writers = [
            self._spawn(
                run_service(
                    "lease renewal", p.renewer.run_once, interval_s=s.renew_interval_s, stop=writing
                )
            ),
            self._spawn(p.completer.run(writing)),
        ]
        followers = [subscription, listener]
        followers += [
            self._spawn(
                run_service(
                    "alert delivery",
                    p.alerts.poll,
                    interval_s=ALERT_INTERVAL_S,
                    stop=claiming,
                    wake=p.state.alerts,
                )
            ),
            self._spawn(
                run_service("late pass", p.late.run_once, interval_s=LATE_INTERVAL_S, stop=claiming)
            ),
            self._spawn(
                run_service(
                    "gate pass", p.gates.run_once, interval_s=GATE_INTERVAL_S, stop=claiming
                )
            ),
        ]
        if s.prune_interval_s > 0:
            followers.append(self._spawn(p.pruner.run(claiming)))
        followers.append(self._spawn(self._backfill(p.backfiller, claiming)))
        watch = self._spawn(self._deathwatch(p.deathwatch, claiming))
        return Services(claiming, writing, heartbeat, lockers, writers, followers, watch)

    @staticmethod
    async def _backfill(backfiller: Backfiller, stop: Signal) -> None:
        try:
            await run_service("backfill", backfiller.poll, interval_s=BACKFILL_POLL_S, stop=stop)
        finally:
            await backfiller.close()

    @staticmethod
    async def _deathwatch(watch: DeathWatch, stop: Signal) -> None:
        try:
            await run_service("death watch", watch.run_once, interval_s=1.0, stop=stop)
        finally:
            await watch.close()

    def _spawn(self, service: Coroutine[Any, Any, None]) -> asyncio.Task[None]:
        task = asyncio.create_task(service)
        task.add_done_callback(self._supervise)
        return task

    def _supervise(self, task: asyncio.Task[None]) -> None:
        """A vital service that crashes stops the node (exit code 1) rather than letting it
        carry on blind."""
        if task.cancelled() or task.exception() is None or self.stop.is_set():
            return
        logger.critical(
            "a vital service crashed; stopping the node",
            exc_info=task.exception(),
            extra={"event": "service_crashed"},
        )
        self._crashed = True
        self.stop.set()
