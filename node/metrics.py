"""Prometheus metrics of one node, read from its ``Stats`` and ``NodeState`` at scrape time.

Nothing here runs on the scheduling path: the node only bumps plain counters, and a
custom collector turns them into metrics when Prometheus scrapes (on the HTTP server's
thread). Labels are bounded: outcomes, error dependency, and one info series per node; no
per-job or per-tenant labels. Fire lag and claim duration become cumulative histograms
fed from the bounded sample windows in ``Stats``: each scrape takes the samples added since
the previous one (at most the window, 4096, per scrape interval; the ``*_total`` counters
stay exact either way).
"""

from __future__ import annotations

import logging
import threading
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from importlib.metadata import PackageNotFoundError, version
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, make_server

from prometheus_client.core import (
    CollectorRegistry,
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.exposition import ThreadingWSGIServer, make_wsgi_app
from prometheus_client.gc_collector import GCCollector
from prometheus_client.platform_collector import PlatformCollector
from prometheus_client.process_collector import ProcessCollector
from prometheus_client.registry import Collector

from cluster.jobs.models import ATTEMPT_OUTCOMES
from cluster.store import tally
from node.state import NodeState
from node.stats import Stats

logger = logging.getLogger(__name__)

FIRE_LAG_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 3600)
# A claim takes a few milliseconds when all is well: fine buckets there, coarse above.
CLAIM_BUCKETS = (
    *(0.0005, 0.001, 0.0015, 0.002, 0.003, 0.004, 0.005, 0.0075, 0.01),
    *(0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5),
)
SERVE_POLL_S = 3600.0


def pulse_version() -> str:
    """The installed Pulse version, as nodes report it in metrics and the member registry."""
    try:
        return version("pulsecron")
    except PackageNotFoundError:
        return "dev"


class _Histogram:
    """A cumulative histogram fed from a bounded window of samples and their total count."""

    def __init__(
        self, bounds: Sequence[float], total: Callable[[], int], window: deque[float]
    ) -> None:
        self.bounds = tuple(bounds)
        self.counts = [0] * len(self.bounds)
        self.count = 0
        self.sum = 0.0
        self._total = total
        self._window = window
        self._seen = 0

    def _snapshot(self) -> tuple[int, list[float]]:
        # The event loop bumps the total and appends the sample as it runs; read the total
        # on both sides of the copy so a fire during the copy cannot shift which samples
        # count as new (a switch between the bump and the append can still misplace one).
        for _ in range(3):
            before = self._total()
            samples = list(self._window.copy())
            if self._total() == before:
                break
        return before, samples

    def ingest(self) -> None:
        total, samples = self._snapshot()
        new = total - self._seen
        if new <= 0:
            return
        self._seen = total
        fresh = samples[-new:]
        for value in fresh:
            for i, bound in enumerate(self.bounds):
                if value <= bound:
                    self.counts[i] += 1
        self.count += len(fresh)
        self.sum += sum(fresh)

    def family(self, name: str, doc: str) -> HistogramMetricFamily:
        buckets = [(repr(float(b)), c) for b, c in zip(self.bounds, self.counts, strict=True)]
        buckets.append(("+Inf", self.count))
        return HistogramMetricFamily(name, doc, buckets=buckets, sum_value=self.sum)


class NodeCollector(Collector):
    """Reads one node's counters and state whenever the registry is collected."""

    def __init__(
        self,
        stats: Stats,
        state_getter: Callable[[], NodeState | None],
        in_flight: Callable[[], int],
    ) -> None:
        self._stats = stats
        self._state = state_getter
        self._in_flight = in_flight
        self._lock = threading.Lock()
        self._lag = _Histogram(FIRE_LAG_BUCKETS, lambda: stats.fired, stats.fire_lag_seconds)
        self._claims = _Histogram(CLAIM_BUCKETS, lambda: stats.claims, stats.claim_seconds)
        self._version = pulse_version()

    def describe(self) -> Iterator[Metric]:
        return iter(())  # collected lazily; nothing to pre-register

    def collect(self) -> Iterator[Metric]:
        s = self._stats
        with self._lock:
            self._lag.ingest()
            self._claims.ingest()
            yield self._lag.family(
                "pulse_fire_lag_seconds", "Delay from a slot's scheduled time to its claim."
            )
            yield self._claims.family(
                "pulse_claim_duration_seconds", "Duration of one claim round trip."
            )
        yield from self._counters(s)
        yield from self._gauges()

    def _counters(self, s: Stats) -> Iterator[Metric]:
        def counter(name: str, doc: str, value: int) -> CounterMetricFamily:
            return CounterMetricFamily(name, doc, value=value)

        yield counter("pulse_slots_fired", "Slots claimed and started on this node.", s.fired)
        runs = CounterMetricFamily("pulse_runs", "Finished runs by outcome.", labels=["outcome"])
        for outcome in sorted({*ATTEMPT_OUTCOMES, *s.outcomes}):
            runs.add_metric([outcome], s.outcomes.get(outcome, 0))
        yield runs
        yield counter("pulse_retries", "Failed runs scheduled for another attempt.", s.retries)
        yield counter(
            "pulse_fenced_writes",
            "Stale writes rejected because the lease was lost.",
            s.fenced_writes,
        )
        yield counter(
            "pulse_slots_skipped", "Slots recorded as skipped by catch-up.", s.skipped_slots
        )
        yield counter(
            "pulse_runs_recovered", "Runs of dead owners taken back for retry.", s.recovered
        )
        yield counter("pulse_leases_lost", "Running slots whose lease was lost.", s.leases_lost)
        yield counter("pulse_shard_locks_acquired", "Shard locks acquired.", s.locks_acquired)
        yield counter("pulse_shard_locks_released", "Shard locks released.", s.locks_released)
        yield counter(
            "pulse_shard_locks_lost", "Shard locks lost with the lock session.", s.locks_lost
        )
        yield counter(
            "pulse_membership_changes", "Changes of the live member list.", s.membership_changes
        )
        yield counter("pulse_runs_pruned", "Run rows deleted past their retention.", s.runs_pruned)
        alerts = CounterMetricFamily(
            "pulse_alert_deliveries", "Alert delivery attempts by outcome.", labels=["outcome"]
        )
        for outcome in ("delivered", "retried", "failed"):
            alerts.add_metric([outcome], s.alerts.get(outcome, 0))
        yield alerts
        yield counter("pulse_slots_late", "Late slots this node raised an alert for.", s.late_slots)
        errors = CounterMetricFamily(
            "pulse_errors", "Failed calls by dependency.", labels=["dependency"]
        )
        errors.add_metric(["postgres"], s.db_errors)
        errors.add_metric(["redis"], s.redis_errors)
        yield errors
        sent = CounterMetricFamily(
            "pulse_db_transactions",
            "Transactions sent to Postgres, by connection and statement (cluster/store/tally.py).",
            labels=["connection", "statement"],
        )
        for (connection, statement), n in sorted(tally.TALLY.items()):
            sent.add_metric([connection, statement], n)
        yield sent

    def _gauges(self) -> Iterator[Metric]:
        state = self._state()
        yield GaugeMetricFamily(
            "pulse_runs_in_flight", "Runs executing on this node now.", value=self._in_flight()
        )
        # Measured by the pruner each pass, never by a scrape.
        s = self._stats
        if s.runs_table_rows is not None:
            yield GaugeMetricFamily(
                "pulse_runs_table_rows",
                "Rows of the runs table, Postgres's estimate as of the pruner's last pass.",
                value=s.runs_table_rows,
            )
        if s.runs_table_bytes is not None:
            yield GaugeMetricFamily(
                "pulse_runs_table_bytes",
                "Bytes of the runs table with its indexes, as of the pruner's last pass.",
                value=s.runs_table_bytes,
            )
        if state is None:
            return
        yield GaugeMetricFamily("pulse_shards_held", "Shard locks held.", value=len(state.held))
        yield GaugeMetricFamily(
            "pulse_shards_desired",
            "Shards the ring assigns to this node.",
            value=len(state.desired),
        )
        yield GaugeMetricFamily("pulse_shards", "Shards in the cluster.", value=state.shard_count)
        yield GaugeMetricFamily("pulse_members", "Live members seen.", value=len(state.live))
        yield GaugeMetricFamily(
            "pulse_claiming", "1 while the node claims work.", value=int(state.claiming)
        )
        info = GaugeMetricFamily(
            "pulse_node_info", "This node's identity.", labels=["node_id", "zone", "version"]
        )
        info.add_metric([state.node_id, state.zone, self._version], 1)
        yield info


def build_registry(
    stats: Stats,
    state_getter: Callable[[], NodeState | None],
    in_flight: Callable[[], int],
) -> CollectorRegistry:
    """A registry with the node's metrics plus the standard process, platform and GC ones."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(NodeCollector(stats, state_getter, in_flight))
    ProcessCollector(registry=registry)
    PlatformCollector(registry=registry)
    GCCollector(registry=registry)
    return registry


class _Quiet(WSGIRequestHandler):
    """No access log line per scrape."""

    def log_message(self, format: str, *args: Any) -> None:
        pass


def serve_metrics(
    port: int,
    stats: Stats,
    state_getter: Callable[[], NodeState | None],
    in_flight: Callable[[], int],
    addr: str,
) -> None:
    """Serve ``/metrics`` on ``addr:port`` from a daemon thread.

    A port that cannot be bound is logged as an error and the node runs on without
    metrics: scheduling matters more than its observability.
    """
    registry = build_registry(stats, state_getter, in_flight)
    try:
        server = make_server(
            addr, port, make_wsgi_app(registry), ThreadingWSGIServer, handler_class=_Quiet
        )
    except OSError as exc:
        logger.error(
            "cannot serve metrics on %s:%d: %s; running without them",
            addr,
            port,
            exc,
            extra={"event": "metrics_unavailable"},
        )
        return
    # serve_forever wakes every poll interval to look for a shutdown request; nothing ever
    # asks (the thread is a daemon), so an idle node need not wake for it.
    threading.Thread(
        target=server.serve_forever,
        kwargs={"poll_interval": SERVE_POLL_S},
        name="pulse-metrics",
        daemon=True,
    ).start()
    logger.info(
        "metrics on http://%s:%d/metrics",
        addr,
        server.server_port,
        extra={"event": "metrics_serving", "port": server.server_port},
    )
