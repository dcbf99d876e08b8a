"""The node processes of a chaos run, each behind its own Postgres and Redis proxies.

A store with a standby (``--pg-ha``, or Sentinel for ``redis-failover``) is reached
directly: a proxy in front of one server cannot follow the primary to another.

Nodes are started by ``cluster.local.processes`` (the harness never imports ``node``), with
JSON logs, one log file per incarnation, and the cluster selected through ``PULSE_*``
variables that point at the node's proxies. A restarted node keeps its node id, as a pod of
a StatefulSet or a systemd unit would.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

from cluster.chaos import poison
from cluster.chaos.servers.proxy import Proxy
from cluster.chaos.verdict.observations import count_log_events
from cluster.local.processes import Command, node_argv, pulse_env, signal_group
from cluster.settings import ClusterSettings


@dataclass(frozen=True)
class FleetConfig:
    """What every node of the run is started with."""

    settings: ClusterSettings  # the real servers; each node reaches them through its proxies
    workdir: Path
    witness_file: Path
    session_timeout_s: float
    extra_args: tuple[str, ...] = ()


@dataclass
class NodeProcess:
    node_id: str
    zone: str
    pg: Proxy | None  # None: straight to the servers (a primary that may move)
    redis: Proxy | None
    proc: asyncio.subprocess.Process | None = None
    incarnation: int = 0
    logs: list[Path] = field(default_factory=list)

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.returncode is None

    def signal(self, sig: signal.Signals) -> None:
        if self.proc is not None:
            signal_group(self.proc, sig)


def endpoint(url: str, default_port: int) -> tuple[str, int]:
    """The (host, port) a URL points at."""
    parts = urlsplit(url)
    return parts.hostname or "127.0.0.1", parts.port or default_port


def via_proxy(url: str, port: int) -> str:
    """``url`` with its host and port replaced by a local proxy's, credentials kept."""
    parts = urlsplit(url)
    user = parts.netloc.rpartition("@")[0]
    netloc = f"{user}@127.0.0.1:{port}" if user else f"127.0.0.1:{port}"
    return urlunsplit(parts._replace(netloc=netloc))


def node_ids(nodes: int, zones: int) -> list[tuple[str, str]]:
    """``(node id, zone)`` pairs, zones assigned round-robin: n1/a, n2/b, n3/c, n4/a..."""
    names = [chr(ord("a") + i) for i in range(zones)]
    return [(f"n{i + 1}", f"zone-{names[i % zones]}") for i in range(nodes)]


class Fleet:
    def __init__(self, config: FleetConfig, nodes: list[NodeProcess]) -> None:
        self.config = config
        self.nodes = {n.node_id: n for n in nodes}
        # Nodes that ended by themselves (the harness never does), but for those the poison
        # job killed: the injector restarts those, as a supervisor would.
        self.exits: list[str] = []

    def __iter__(self) -> Iterator[NodeProcess]:
        return iter(self.nodes.values())

    async def start(self, node: NodeProcess) -> None:
        c = self.config
        node.incarnation += 1
        log_path = c.workdir / f"{node.node_id}.{node.incarnation}.log"
        node.logs.append(log_path)
        settings = c.settings
        if node.pg is not None:
            settings = replace(
                settings, database_url=via_proxy(settings.database_url, node.pg.port)
            )
        if node.redis is not None:
            settings = replace(settings, redis_url=via_proxy(settings.redis_url, node.redis.port))
        argv = node_argv(
            node.node_id, node.zone, "--session-timeout", f"{c.session_timeout_s:g}s", *c.extra_args
        )
        env = pulse_env(settings, PULSE_WITNESS_FILE=str(c.witness_file), PULSE_LOG_FORMAT="json")
        node.proc = await Command(argv, env, c.workdir).start_async(log_path)

    async def kill(self, node: NodeProcess) -> None:
        node.signal(signal.SIGKILL)
        if node.proc is not None:
            await node.proc.wait()

    async def kill_all(self) -> None:
        await asyncio.gather(*(self.kill(n) for n in self))

    async def watch(self, stop: asyncio.Event, t0: float) -> None:
        """Until ``stop``, note every node process that exits without being killed."""
        seen: set[tuple[str, int]] = set()
        while not stop.is_set():
            for node in self:
                code = node.proc.returncode if node.proc else None
                key = (node.node_id, node.incarnation)
                if code not in (None, -signal.SIGKILL, poison.EXIT_CODE) and key not in seen:
                    seen.add(key)
                    self.exits.append(f"{node.node_id} exit {code} at t+{time.time() - t0:.0f}s")
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), 0.5)

    def log_events(self) -> dict[str, int]:
        """How often each ``event`` appears in the logs of every node incarnation."""
        events: Counter[str] = Counter()
        for node in self:
            for path in node.logs:
                with path.open(encoding="utf-8", errors="replace") as lines:
                    count_log_events(lines, events)
        return dict(events)
