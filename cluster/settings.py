"""Settings: what the whole cluster must agree on, and what each node chooses for itself.

Both are frozen dataclasses built from explicit values, then ``PULSE_*`` environment
variables, then the defaults below (Postgres and Redis on 127.0.0.1). ``validate()`` rejects
values that would break the guarantees (``node/__init__.py``) before anything connects.
"""

from __future__ import annotations

import hashlib
import ipaddress
import os
import re
import secrets
import socket
from dataclasses import dataclass, field

from cluster.errors import ConfigError, InvalidInput
from cluster.urls import check_database_url, check_redis_url
from cluster.urls import mask_url as mask_url  # the one masking, kept importable here

DEFAULT_DATABASE_URL = "postgresql://postgres@127.0.0.1:5432/postgres"
DEFAULT_REDIS_URL = "redis://127.0.0.1:6379/0"
DEFAULT_SCHEMA = "pulse"
DEFAULT_CLUSTER = "pulse"
DEFAULT_SHARDS = 256

DEFAULT_ZONE = "default"
DEFAULT_CONCURRENCY = 32
DEFAULT_HEARTBEAT_INTERVAL_S = 1.0
DEFAULT_HEARTBEAT_TTL_S = 5.0
DEFAULT_POLL_INTERVAL_S = 1.0
DEFAULT_SESSION_TIMEOUT_S = 10.0
# Silent this long in Redis and on its lock session, a peer is frozen and its session is
# ended (docs/design/recovery.md); 0 leaves that to its session timeout.
DEFAULT_FREEZE_LIMIT_S = 3.0
DEFAULT_LEASE_S = 30.0
DEFAULT_RENEW_INTERVAL_S = 5.0
DEFAULT_DRAIN_TIMEOUT_S = 30.0
DEFAULT_STATEMENT_TIMEOUT_S = 5.0
DEFAULT_REDIS_TIMEOUT_S = 2.0
DEFAULT_PRUNE_INTERVAL_S = 30.0  # 0: this node does not prune
# Metrics say what runs where: served on loopback unless the operator names an address.
DEFAULT_METRICS_BIND = "127.0.0.1"
MIN_PRUNE_INTERVAL_S = 1.0

IDENTIFIER = re.compile(r"^[a-z_][a-z0-9_]{0,62}$")
_CLUSTER = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")
_NODE_ID = re.compile(r"^[A-Za-z0-9_.:-]{1,63}$")


def _env(name: str, default: str) -> str:
    value = os.environ.get(name)
    return value if value else default


@dataclass(frozen=True)
class ClusterSettings:
    """What every node and admin command of one cluster must agree on."""

    database_url: str = DEFAULT_DATABASE_URL
    redis_url: str = DEFAULT_REDIS_URL
    schema: str = DEFAULT_SCHEMA
    cluster: str = DEFAULT_CLUSTER

    @classmethod
    def from_env(cls, **overrides: str | None) -> ClusterSettings:
        values = {
            "database_url": _env("PULSE_DATABASE_URL", DEFAULT_DATABASE_URL),
            "redis_url": _env("PULSE_REDIS_URL", DEFAULT_REDIS_URL),
            "schema": _env("PULSE_SCHEMA", DEFAULT_SCHEMA),
            "cluster": _env("PULSE_CLUSTER", DEFAULT_CLUSTER),
        }
        values.update({k: v for k, v in overrides.items() if v is not None})
        return cls(**values).validate()

    def validate(self) -> ClusterSettings:
        if not IDENTIFIER.match(self.schema):
            raise InvalidInput("schema", f"{self.schema!r} is not a lower-case SQL identifier")
        if not _CLUSTER.match(self.cluster):
            raise InvalidInput("cluster", f"{self.cluster!r}: use 1-64 of A-Z a-z 0-9 _ . -")
        check_database_url(self.database_url)
        check_redis_url(self.redis_url)
        return self

    @property
    def lock_namespace(self) -> int:
        """First int of every shard advisory lock: a stable non-negative int4."""
        digest = hashlib.blake2b(f"{self.cluster}/{self.schema}".encode(), digest_size=4)
        return int.from_bytes(digest.digest(), "big") & 0x7FFFFFFF

    @property
    def key_prefix(self) -> str:
        """Prefix of every Redis key and channel of this cluster."""
        return f"pulse:{self.cluster}:{self.schema}:"

    @property
    def wake_channel(self) -> str:
        """The LISTEN/NOTIFY channel that wakes claim loops."""
        return f"{self.schema}_wake"


def default_node_id() -> str:
    host = socket.gethostname().split(".")[0] or "node"
    return f"{host[:48]}-{secrets.token_hex(3)}"


@dataclass(frozen=True)
class NodeSettings:
    """What one node chooses for itself; intervals are float seconds."""

    node_id: str = field(default_factory=default_node_id)
    zone: str = DEFAULT_ZONE
    concurrency: int = DEFAULT_CONCURRENCY
    heartbeat_interval_s: float = DEFAULT_HEARTBEAT_INTERVAL_S
    heartbeat_ttl_s: float = DEFAULT_HEARTBEAT_TTL_S
    poll_interval_s: float = DEFAULT_POLL_INTERVAL_S
    session_timeout_s: float = DEFAULT_SESSION_TIMEOUT_S
    lease_s: float = DEFAULT_LEASE_S
    renew_interval_s: float = DEFAULT_RENEW_INTERVAL_S
    drain_timeout_s: float = DEFAULT_DRAIN_TIMEOUT_S
    statement_timeout_s: float = DEFAULT_STATEMENT_TIMEOUT_S
    redis_timeout_s: float = DEFAULT_REDIS_TIMEOUT_S
    prune_interval_s: float = DEFAULT_PRUNE_INTERVAL_S
    shards: int | None = None
    metrics_port: int | None = None
    fairness: bool = True  # claim across tenants in turn when more is due than it can run
    celery_broker: str | None = None  # for celery: jobs that name none; may hold a password
    handler_role: str | None = None  # ctx.transaction() statements run as it (SET LOCAL ROLE)
    otel: bool = False  # one OpenTelemetry span per attempt (node.handlers.traces; OTEL_* env)
    freeze_limit_s: float = DEFAULT_FREEZE_LIMIT_S  # 0: peers' sessions end at their timeout
    metrics_bind: str = DEFAULT_METRICS_BIND  # the address metrics_port is served on

    def validate(self) -> NodeSettings:
        if not _NODE_ID.match(self.node_id):
            raise InvalidInput("node_id", f"{self.node_id!r}: use 1-63 of A-Z a-z 0-9 _ . : -")
        if not _CLUSTER.match(self.zone):
            raise InvalidInput("zone", f"{self.zone!r}: use 1-64 of A-Z a-z 0-9 _ . -")
        if not 1 <= self.concurrency <= 10_000:
            raise InvalidInput("concurrency", "must be between 1 and 10000")
        for name in (
            "heartbeat_interval_s",
            "heartbeat_ttl_s",
            "poll_interval_s",
            "session_timeout_s",
            "lease_s",
            "renew_interval_s",
            "statement_timeout_s",
            "redis_timeout_s",
        ):
            if getattr(self, name) <= 0:
                raise InvalidInput(name.removesuffix("_s").replace("_", "-"), "must be positive")
        if self.drain_timeout_s < 0:
            raise InvalidInput("drain-timeout", "must not be negative")
        if self.prune_interval_s != 0 and self.prune_interval_s < MIN_PRUNE_INTERVAL_S:
            raise InvalidInput("prune-interval", "must be 0 (off) or at least 1s")
        if self.freeze_limit_s != 0 and self.freeze_limit_s < 2 * self.heartbeat_interval_s:
            raise InvalidInput("freeze-limit", "must be 0 (off) or at least 2 heartbeat intervals")
        if self.heartbeat_ttl_s < 2 * self.heartbeat_interval_s:
            raise ConfigError("heartbeat TTL must be at least twice the heartbeat interval")
        # The lock session is kept busy by the claim loop; it must never look idle
        # to Postgres while the node is healthy, so the timeout needs ample headroom.
        if self.session_timeout_s < 3 * self.poll_interval_s + 1:
            raise ConfigError(
                f"session timeout {self.session_timeout_s}s is not well above the poll "
                f"interval {self.poll_interval_s}s (need at least 3x + 1s); a healthy node "
                "would lose its shard locks"
            )
        if self.lease_s < 2 * self.renew_interval_s:
            raise ConfigError("lease must be at least twice the renew interval")
        if self.handler_role is not None and not IDENTIFIER.match(self.handler_role):
            raise InvalidInput("handler-role", f"{self.handler_role!r} is not a SQL identifier")
        if self.metrics_port is not None and not 0 <= self.metrics_port <= 65535:
            raise InvalidInput("metrics-port", "must be a TCP port")
        try:
            ipaddress.ip_address(self.metrics_bind)
        except ValueError as exc:
            raise InvalidInput(
                "metrics-bind", f"{self.metrics_bind!r} is not an IP address (0.0.0.0: every one)"
            ) from exc
        return self
