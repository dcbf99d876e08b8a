"""What a node is made of: every service it runs, built and wired to the others and to their
connections (``wire``), before anything starts.

Kept apart from ``node.runtime``, which owns the lifecycle (open the lock session, start the
services, supervise them, drain): who talks to whom is read here, when things run there.
"""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass
from datetime import UTC, datetime

from cluster.members import MemberInfo, MemberRegistry
from cluster.settings import ClusterSettings, NodeSettings
from cluster.store.config import ConfigCache
from cluster.store.housekeeping import pruning
from cluster.store.housekeeping.alerts import AlertStore
from cluster.store.lock.effects import EffectsStore
from cluster.store.lock.lifelock import LifeWatch
from cluster.store.lock.session import LockSession
from cluster.store.lock.writer import ResultWriter
from node.handlers.effects import Effects
from node.handlers.forwarding import Forwarders
from node.maintenance.backfiller import Backfiller
from node.maintenance.gatepass import GatePass
from node.maintenance.lateness import LatePass
from node.maintenance.outbox import AlertDelivery
from node.maintenance.pruner import Pruner
from node.maintenance.recovery import Recovery, Tracked
from node.membership.deathwatch import DeathWatch
from node.membership.heartbeat import Heartbeat
from node.membership.shards import ShardKeeper
from node.metrics import pulse_version
from node.pipeline.claimer import Claimer, idle_poll_s
from node.pipeline.clock import DbClock
from node.pipeline.completer import Completer
from node.pipeline.executor import Executor
from node.pipeline.listener import WakeListener
from node.pipeline.pacing import Pacing
from node.pipeline.renewer import Renewer
from node.service import Signal
from node.shutdown import Shutdown
from node.state import NodeState
from node.stats import Stats

TRUST_MARGIN_S = 2.0


@dataclass(frozen=True)
class Parts:
    """A node's services, wired and not started yet."""

    state: NodeState
    heartbeat: Heartbeat
    keeper: ShardKeeper
    deathwatch: DeathWatch
    claimer: Claimer
    recovery: Recovery
    listener: WakeListener
    renewer: Renewer
    completer: Completer
    executor: Executor
    stop_claiming: Signal
    stop_writing: Signal
    shutdown: Shutdown
    pruner: Pruner
    alerts: AlertDelivery
    late: LatePass
    gates: GatePass
    backfiller: Backfiller
    config: ConfigCache


def wire(
    cluster: ClusterSettings,
    settings: NodeSettings,
    stats: Stats,
    session: LockSession,
    registry: MemberRegistry,
    shard_count: int,
) -> Parts:
    """The node's services, wired to each other and to their connections, not started.
    Each is built after everything it uses, so none is handed a promise of a later one."""
    s = settings
    timeout_s = s.statement_timeout_s
    clock = DbClock()
    pacing = Pacing(clock)
    state = NodeState(s.node_id, s.zone, shard_count)
    writer = ResultWriter(cluster, s.node_id, s.zone, statement_timeout_s=timeout_s)
    effects = Effects(EffectsStore(cluster, s.node_id, s.zone, s.handler_role))
    # One connection for the node's upkeep, beside the lock session and the writer: the
    # config cache, pruning, backfills, the gate pass, alerts and the late pass take turns
    # on it, a statement or a transaction at a time (docs/design/driver.md).
    upkeep = pruning.side_connection(cluster, f"{s.node_id}/upkeep", statement_timeout_s=timeout_s)
    config = ConfigCache(upkeep)
    forwarders = Forwarders(s.celery_broker, config.values)
    tracing = None
    if s.otel:  # imported only then: a node without --otel loads no OpenTelemetry
        from node.handlers.traces import Tracing

        tracing = Tracing(s.node_id, s.zone)
    completer = Completer(
        writer.completions,
        clock,
        stats,
        state.wake,
        pacing,
        effects,
        lease_s=s.lease_s,
        tracing=tracing,
        members=state.members,
    )
    executor = Executor(
        s.concurrency, s.node_id, s.zone, completer.run_done, effects, forwarders, tracing
    )
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
        fairness=s.fairness,
        idle_interval_s=idle_poll_s(s.poll_interval_s, s.freeze_limit_s, s.session_timeout_s),
    )

    def tracked() -> Tracked:
        """The leases this node still runs, or has yet to write the end of."""
        jobs = set(executor.leases()) | completer.leases()
        return jobs, set(executor.flight_leases()) | completer.flight_leases()

    recovery = Recovery(
        state,
        session,
        stats,
        completer.run_done,
        lease_s=s.lease_s,
        flights_queued=claimer.flights_queued,
        tracing=tracing,
        tracked=tracked,
    )
    keeper = ShardKeeper(
        state,
        session,
        stats,
        recovery.recover,
        expected_shards=s.shards,
        take_back=recovery.take_back_untracked,
        connected=registry.connected,
        evict=registry.deregister,
        frozen_s=s.freeze_limit_s,
        beat_s=s.heartbeat_interval_s,
    )
    alert_store = AlertStore(upkeep)
    stop_claiming = Signal()
    return Parts(
        state=state,
        heartbeat=Heartbeat(
            registry,
            _member_info(s),
            state,
            stats,
            ttl_s=s.heartbeat_ttl_s,
            unanswered=session.unanswered_s,
        ),
        keeper=keeper,
        deathwatch=DeathWatch(state, LifeWatch(cluster, s.node_id)),
        claimer=claimer,
        recovery=recovery,
        listener=WakeListener(cluster, state, stop_claiming, executor.stop),
        renewer=Renewer(session, executor, stats, lease_s=s.lease_s),
        completer=completer,
        executor=executor,
        stop_claiming=stop_claiming,
        stop_writing=Signal(),
        shutdown=Shutdown(
            node_id=s.node_id,
            state=state,
            registry=registry,
            keeper=keeper,
            session=session,
            executor=executor,
            completer=completer,
            writer=writer,
            drain_timeout_s=s.drain_timeout_s,
        ),
        pruner=Pruner(upkeep, state, stats, interval_s=s.prune_interval_s),
        alerts=AlertDelivery(alert_store, s.node_id, stats, config=config.values),
        late=LatePass(alert_store, shard_count, stats),
        gates=GatePass(upkeep, state),
        backfiller=Backfiller(upkeep, state, stats, claimer.flights_queued),
        config=config,
    )


def _member_info(settings: NodeSettings) -> MemberInfo:
    return MemberInfo(
        node_id=settings.node_id,
        zone=settings.zone,
        host=socket.gethostname(),
        pid=os.getpid(),
        started_at=datetime.now(UTC).isoformat(timespec="seconds"),
        version=pulse_version(),
        concurrency=settings.concurrency,
    )
