"""``pulse node``: run one scheduler node; also the ``pulse`` entry point.

The admin commands live in ``cluster.cli``; this module adds the commands that run node
code, so the import layers stay one way (node -> cluster -> ring). Every ``pulse`` command
imports this module, so the node's own code (``node.runtime``: Redis, the mailer, the
handlers) and the job registries are imported only when ``pulse node`` starts a node:
``Node`` is looked up in this module then (a module ``__getattr__``), where a test can put
its own.
"""

from __future__ import annotations

import asyncio
import importlib.util
import logging
import os
import sys
from typing import TYPE_CHECKING, Any

import click

from cluster import settings as defaults
from cluster.cli.app import cli
from cluster.cli.base import duration_option, fail, seconds, settings_of
from cluster.errors import ConfigError, InvalidInput
from cluster.settings import DEFAULT_METRICS_BIND, NodeSettings, default_node_id

if TYPE_CHECKING:
    from node.runtime import Node


class NodeContext(logging.Filter):
    """Stamps every log record of this process with the node id and zone."""

    def __init__(self, node_id: str, zone: str) -> None:
        super().__init__()
        self.node_id = node_id
        self.zone = zone

    def filter(self, record: logging.LogRecord) -> bool:
        record.node_id = self.node_id
        record.zone = self.zone
        return True


@cli.command("node")
@click.option("--node-id", envvar="PULSE_NODE_ID", default=None, help="[default: host-xxxxxx]")
@click.option("--zone", envvar="PULSE_ZONE", default=defaults.DEFAULT_ZONE, show_default=True)
@click.option(
    "--concurrency",
    envvar="PULSE_CONCURRENCY",
    type=int,
    default=defaults.DEFAULT_CONCURRENCY,
    show_default=True,
    help="Runs in flight at most.",
)
@click.option(
    "--shards",
    envvar="PULSE_SHARDS",
    type=int,
    default=None,
    help="Expected shard count; refuse to start if the database differs.",
)
@duration_option(
    "--poll-interval",
    defaults.DEFAULT_POLL_INTERVAL_S,
    "Longest wait between two claims.",
    envvar="PULSE_POLL_INTERVAL",
)
@duration_option(
    "--session-timeout",
    defaults.DEFAULT_SESSION_TIMEOUT_S,
    "idle_session_timeout of the lock session.",
    envvar="PULSE_SESSION_TIMEOUT",
)
@duration_option(
    "--freeze-limit",
    defaults.DEFAULT_FREEZE_LIMIT_S,
    "End a peer's lock session once it sent no heartbeat and no statement for this long "
    "(a frozen node), or its session went unanswered and idle this long (a stalled one); "
    "0: leave it to that node's session timeout.",
    envvar="PULSE_FREEZE_LIMIT",
)
@duration_option(
    "--heartbeat-interval",
    defaults.DEFAULT_HEARTBEAT_INTERVAL_S,
    "How often the node renews its heartbeat in Redis.",
    envvar="PULSE_HEARTBEAT_INTERVAL",
)
@duration_option(
    "--heartbeat-ttl",
    defaults.DEFAULT_HEARTBEAT_TTL_S,
    "Heartbeat age after which a node is no longer a member.",
    envvar="PULSE_HEARTBEAT_TTL",
)
@duration_option(
    "--lease",
    defaults.DEFAULT_LEASE_S,
    "Lease of a claimed run; renewed while it runs.",
    envvar="PULSE_LEASE",
)
@duration_option(
    "--renew-interval",
    defaults.DEFAULT_RENEW_INTERVAL_S,
    "How often leases of running runs are renewed.",
    envvar="PULSE_RENEW_INTERVAL",
)
@duration_option(
    "--drain-timeout",
    defaults.DEFAULT_DRAIN_TIMEOUT_S,
    "How long a stopping node lets its runs finish.",
    envvar="PULSE_DRAIN_TIMEOUT",
)
@duration_option(
    "--prune-interval",
    defaults.DEFAULT_PRUNE_INTERVAL_S,
    "How often to delete the runs of held shards past their retention (0: never).",
    envvar="PULSE_PRUNE_INTERVAL",
)
@click.option(
    "--handler-role",
    envvar="PULSE_HANDLER_ROLE",
    default=None,
    help="Database role handlers' ctx.transaction() statements run as (pulse init --roles "
    "makes pulse_handler); Pulse's own statement of the run, as the node's login.",
)
@click.option(
    "--metrics-port",
    envvar="PULSE_METRICS_PORT",
    type=int,
    default=None,
    help="Serve Prometheus metrics on this port (off by default).",
)
@click.option(
    "--metrics-bind",
    envvar="PULSE_METRICS_BIND",
    default=DEFAULT_METRICS_BIND,
    show_default=True,
    help="Address --metrics-port listens on (0.0.0.0: every interface).",
)
@click.option(
    "--fairness/--no-fairness",
    envvar="PULSE_FAIRNESS",
    default=True,
    show_default=True,
    help="When more is due than the node can run, claim across tenants in turn.",
)
@click.option(
    "--celery-broker",
    envvar="PULSE_CELERY_BROKER",
    default=None,
    help="Broker URL for celery: jobs that name none (never logged).",
)
@click.option(
    "--otel/--no-otel",
    envvar="PULSE_OTEL",
    default=False,
    show_default=True,
    help="Export one OpenTelemetry span per attempt over OTLP/HTTP (the OTEL_* variables "
    "configure it; needs pulsecron[otel]).",
)
@click.option(
    "--path",
    "paths",
    multiple=True,
    type=click.Path(file_okay=False),
    help="Extra import path for handler modules (the working directory is on it).",
)
@click.option(
    "--sync-jobs",
    "sync_modules",
    multiple=True,
    envvar="PULSE_SYNC_JOBS",
    help="At start, create the missing jobs of this module's pulsecron Registry objects "
    "(repeatable) [env PULSE_SYNC_JOBS].",
)
@click.pass_context
def node_command(
    ctx: click.Context,
    node_id: str | None,
    zone: str,
    concurrency: int,
    shards: int | None,
    poll_interval: str,
    session_timeout: str,
    freeze_limit: str,
    heartbeat_interval: str,
    heartbeat_ttl: str,
    lease: str,
    renew_interval: str,
    drain_timeout: str,
    prune_interval: str,
    metrics_port: int | None,
    metrics_bind: str,
    handler_role: str | None,
    fairness: bool,
    celery_broker: str | None,
    otel: bool,
    paths: tuple[str, ...],
    sync_modules: tuple[str, ...],
) -> None:
    """Run one scheduler node until SIGTERM or Ctrl-C."""
    from cluster.jobs.registry import handlers_of, load_modules, specs_of

    cluster = settings_of(ctx)
    try:
        settings = NodeSettings(
            node_id=node_id or default_node_id(),
            zone=zone,
            concurrency=concurrency,
            shards=shards,
            poll_interval_s=seconds(poll_interval, "poll-interval"),
            session_timeout_s=seconds(session_timeout, "session-timeout"),
            freeze_limit_s=seconds(freeze_limit, "freeze-limit"),
            heartbeat_interval_s=seconds(heartbeat_interval, "heartbeat-interval"),
            heartbeat_ttl_s=seconds(heartbeat_ttl, "heartbeat-ttl"),
            lease_s=seconds(lease, "lease"),
            renew_interval_s=seconds(renew_interval, "renew-interval"),
            drain_timeout_s=seconds(drain_timeout, "drain-timeout"),
            prune_interval_s=seconds(prune_interval, "prune-interval"),
            metrics_port=metrics_port,
            metrics_bind=metrics_bind,
            fairness=fairness,
            celery_broker=celery_broker or None,
            handler_role=handler_role or None,
            otel=otel,
        ).validate()
    except InvalidInput as exc:
        fail(f"invalid {exc}", 2)
    except ConfigError as exc:
        fail(f"refusing to start: {exc}", 2)
    if settings.otel and not _otel_installed():
        fail("refusing to start: --otel needs OpenTelemetry: pip install 'pulsecron[otel]'", 2)
    for extra in (*reversed(paths), os.getcwd()):
        if extra not in sys.path:
            sys.path.insert(0, extra)
    try:
        registries = load_modules(sync_modules)
        specs = specs_of(registries)
    except InvalidInput as exc:
        fail(f"invalid {exc}", 2)
    logging.getLogger().handlers[0].addFilter(NodeContext(settings.node_id, settings.zone))
    node: type[Node] = sys.modules[__name__].Node  # node.runtime's, or a test's stand-in
    code = asyncio.run(node(cluster, settings, specs, handlers_of(registries)).run())
    sys.exit(code)


def _otel_installed() -> bool:
    """Whether the ``otel`` extra is there (looked up only for a node started with --otel)."""
    try:
        return all(
            importlib.util.find_spec(name) is not None
            for name in ("opentelemetry.sdk.trace", "opentelemetry.exporter.otlp.proto.http")
        )
    except ImportError:
        return False


def __getattr__(name: str) -> Any:
    """``Node``, imported from ``node.runtime`` when first asked for (by ``pulse node``)."""
    if name != "Node":
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    from node import runtime

    globals()[name] = runtime.Node
    return runtime.Node


def main() -> None:
    cli(prog_name="pulse")
