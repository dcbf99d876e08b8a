"""A running node: wires the services together, starts them, and drains on shutdown.

Startup: open the lock session (refusing settings that break the guarantees), register
the heartbeat, then run heartbeat, membership watch, shard keeper, claim loop, executor,
completer, lease renewal, periodic recovery and the NOTIFY listener. SIGTERM/SIGINT: stop
claiming, leave the member registry, unlock every shard so others take them at once, let
in-flight runs finish up to the drain timeout, release the rest for another attempt
elsewhere, flush completions, exit 0. A second signal exits at once.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import socket
from datetime import UTC, datetime
from importlib.metadata import PackageNotFoundError, version

from cluster.errors import ConfigError, MembershipError, StoreError
from cluster.members import MemberInfo, MemberRegistry
from cluster.settings import ClusterSettings, NodeSettings, mask_url
from cluster.store import notify
from cluster.store.session import LockSession
from cluster.store.writer import ResultWriter
from node.claimer import Claimer
from node.clock import DbClock
from node.completer import Completer
from node.executor import Executor
from node.heartbeat import Heartbeat
from node.metrics import serve_metrics
from node.pacing import Pacing
from node.recovery import Recovery
from node.renewer import Renewer
from node.service import Failures, Signal, run_service, wait_any
from node.shards import ShardKeeper
from node.state import NodeState
from node.stats import Stats

logger = logging.getLogger(__name__)

RECOVERY_INTERVAL_S = 2.0
TRUST_MARGIN_S = 2.0
FLUSH_TIMEOUT_S = 10.0


def pulse_version() -> str:
    try:
        return version("pulsecron")
    except PackageNotFoundError:
        return "dev"


class Node:
    def __init__(self, cluster: ClusterSettings, settings: NodeSettings) -> None:
        self.cluster = cluster
        self.settings = settings
        self.stats = Stats()
        self.stop = Signal()
        self._signals = 0
        self.state: NodeState | None = None
        # Handler threads still stuck in runs that timed out when the node stopped.
        self.threads_stuck = 0

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

    async def run(self) -> int:
        """Run until stopped; returns the process exit code."""
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
        registry = MemberRegistry(self.cluster, timeout_s=s.redis_timeout_s)
        try:
            return await self._serve(session, registry, shard_count)
        finally:
            await session.close()
            await registry.close()

    async def _serve(self, session: LockSession, registry: MemberRegistry, shard_count: int) -> int:
        s = self.settings
        stats = self.stats
        clock = DbClock()
        pacing = Pacing(clock)
        state = NodeState(s.node_id, s.zone, shard_count)
        self.state = state
        writer = ResultWriter(
            self.cluster, s.node_id, s.zone, statement_timeout_s=s.statement_timeout_s
        )
        completer = Completer(writer, clock, stats, state.wake, pacing)
        executor = Executor(s.concurrency, s.node_id, s.zone, completer.run_done)
        if s.metrics_port is not None:
            serve_metrics(s.metrics_port, stats, lambda: self.state, lambda: len(executor.running))
        info = MemberInfo(
            node_id=s.node_id,
            zone=s.zone,
            host=socket.gethostname(),
            pid=os.getpid(),
            started_at=datetime.now(UTC).isoformat(timespec="seconds"),
            version=pulse_version(),
            concurrency=s.concurrency,
        )
        heartbeat = Heartbeat(registry, info, state, stats, ttl_s=s.heartbeat_ttl_s)
        keeper: ShardKeeper
        recovery = Recovery(state, session, stats, lambda: keeper.alive)
        try:
            await recovery.recover_own()  # before this process claims anything
        except StoreError as exc:
            logger.warning("runs of a previous process of this node wait for their leases: %s", exc)
        keeper = ShardKeeper(state, session, stats, recovery.recover, expected_shards=s.shards)
        claimer = Claimer(
            state,
            session,
            executor,
            completer,
            clock,
            stats,
            pacing,
            poll_interval_s=s.poll_interval_s,
            lease_s=s.lease_s,
            trust_margin_s=min(TRUST_MARGIN_S, s.session_timeout_s / 4),
        )
        renewer = Renewer(session, executor, stats, lease_s=s.lease_s)

        membership_stop = Signal()
        work_stop = Signal()
        completer_stop = Signal()

        def on_notify(payload: str) -> None:
            try:
                shard = int(payload)
            except ValueError:
                return
            if shard in state.held:
                state.wake.set()

        async def listener() -> None:
            failures = Failures("wake-up listener")
            while not work_stop.is_set():
                try:
                    await notify.listen(self.cluster, s.node_id, on_notify, work_stop)
                except StoreError as exc:
                    failures.failed(exc)
                    await wait_any(failures.backoff_s(0.5, 5.0), work_stop)

        async def heartbeat_once() -> None:
            try:
                await heartbeat.run_once()
            except MembershipError as exc:
                logger.warning("Redis unavailable at start: %s", exc)

        await heartbeat_once()
        membership = [
            run_service(
                "heartbeat",
                heartbeat.run_once,
                interval_s=s.heartbeat_interval_s,
                stop=membership_stop,
                wake=state.membership,
            ),
            heartbeat.watch(membership_stop),
        ]
        work = [
            run_service(
                "shard locks",
                keeper.run_once,
                interval_s=s.heartbeat_interval_s,
                stop=work_stop,
                wake=state.rebalance,
                backoff_cap_s=1.0,
            ),
            claimer.run(work_stop),
            run_service(
                "recovery", recovery.run_once, interval_s=RECOVERY_INTERVAL_S, stop=work_stop
            ),
            listener(),
        ]
        background = [
            run_service(
                "lease renewal",
                renewer.run_once,
                interval_s=s.renew_interval_s,
                stop=completer_stop,
            ),
            completer.run(completer_stop),
        ]
        tasks = {
            name: [asyncio.create_task(c) for c in group]
            for name, group in (("membership", membership), ("work", work), ("bg", background))
        }
        crashed = asyncio.Event()

        def watch_task(task: asyncio.Task[None]) -> None:
            if not task.cancelled() and task.exception() is not None and not self.stop.is_set():
                logger.critical(
                    "a vital service crashed; stopping the node",
                    exc_info=task.exception(),
                    extra={"event": "service_crashed"},
                )
                crashed.set()
                self.stop.set()

        for group in tasks.values():
            for task in group:
                task.add_done_callback(watch_task)

        await self.stop.wait()

        # -- drain -----------------------------------------------------------------
        # Every moment between the last claim and the unlock is a gap in this node's shards,
        # so only what must end first is waited for: the heartbeat (or it could register
        # the node again after it left) and the services that claim or lock. The
        # subscription and the NOTIFY listener only notice a stop within a second; they
        # end in the background.
        state.claiming = False
        membership_stop.set()
        work_stop.set()
        heartbeat_task, *watchers = tasks["membership"]
        *lockers, listener_task = tasks["work"]
        await _finish([heartbeat_task], 3.0)
        try:
            await registry.deregister(s.node_id)
        except MembershipError as exc:
            logger.warning("could not leave the member registry: %s", exc)
        await _finish(lockers, 5.0)
        try:
            await keeper.release_all()
        except StoreError as exc:
            logger.warning("could not unlock shards (they free with the session): %s", exc)
        left = await executor.drain(s.drain_timeout_s)
        if left:
            try:
                await session.release(
                    [(j.id, j.lease_token) for j in left], "node shut down before the run ended"
                )
                logger.warning(
                    "released %d unfinished runs for another attempt",
                    len(left),
                    extra={"event": "runs_released"},
                )
            except StoreError as exc:
                logger.warning("could not release unfinished runs (recovery will): %s", exc)
        completer_stop.set()
        await _finish(tasks["bg"], FLUSH_TIMEOUT_S)
        await _finish([*watchers, listener_task], 3.0)
        if completer.pending:
            logger.error(
                "%d completions could not be written before exit; their slots will be "
                "recovered and run again",
                completer.pending,
                extra={"event": "completions_lost"},
            )
        executor.shutdown()
        self.threads_stuck = executor.threads.stuck
        await writer.close()
        logger.info("node stopped", extra={"event": "node_stopped"})
        return 1 if crashed.is_set() else 0


async def _finish(tasks: list[asyncio.Task[None]], timeout_s: float) -> None:
    """Let tasks end by themselves within ``timeout_s``, then cancel the rest."""
    if not tasks:
        return
    _, pending = await asyncio.wait(tasks, timeout=timeout_s)
    for task in pending:
        task.cancel()
    if pending:
        await asyncio.gather(*pending, return_exceptions=True)
