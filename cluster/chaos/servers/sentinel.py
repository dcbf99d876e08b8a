"""A throwaway Redis Sentinel setup: a primary, its replica and one sentinel on local ports.

Pulse reaches Redis through ``redis+sentinel://`` URLs; this is the real thing to test them
against (Debian's ``redis-sentinel``, installed when missing). One sentinel with quorum 1
is enough to fail over, and it keeps the setup small: what is tested is Pulse finding the
new primary, not Sentinel's own agreement. It notices a dead primary after 1 s
(``down-after-milliseconds``) and promotes the replica. Replication is asynchronous, as it
always is in Redis: the last heartbeats before a failover may be lost, which only delays a
rebalance (Redis never decides who owns a shard).

Servers run without persistence; a killed primary restarted later comes back empty, as a
replica of the new primary. ``redis-cli`` (from ``redis-tools``)
asks the sentinel and the servers their roles: ``cluster.members`` alone imports redis.
Its processes, their life cycle and the wait for a promotion are ``serverset``'s; the API
is blocking, and ``pulse chaos`` calls it from a thread.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

from cluster.chaos.servers.packages import ensure_command
from cluster.chaos.servers.serverset import ServerSet
from cluster.local.processes import free_port

SERVICE = "pulse"
START_TIMEOUT_S = 30.0
POLL_S = 0.1
DOWN_AFTER_MS = 1000
FAILOVER_TIMEOUT_MS = 5000


class SentinelSet(ServerSet):
    """Redis servers ``r1`` (first primary) and ``r2`` (its replica) and one sentinel."""

    prefix = "sentinel"
    start_timeout_s = START_TIMEOUT_S
    poll_s = POLL_S

    def __init__(self, log_dir: Path | None = None) -> None:
        self.sentinel_bin = ensure_command("redis-sentinel", "redis-sentinel")
        self.server_bin = ensure_command("redis-server", "redis-server")
        self.cli_bin = ensure_command("redis-cli", "redis-tools")
        super().__init__(log_dir)
        self.ports = {"r1": free_port(), "r2": free_port()}
        self.sentinel_port = free_port()

    @property
    def url(self) -> str:
        return f"redis+sentinel://127.0.0.1:{self.sentinel_port}/{SERVICE}/0"

    # -- life cycle -------------------------------------------------------------------

    def start(self) -> None:
        self._server("r1")
        self._server("r2", replica_of=self.ports["r1"])
        self.wait(lambda: self.replicating("r2"), "r2 to replicate")
        conf = self.root / "sentinel.conf"
        conf.write_text(
            f"port {self.sentinel_port}\n"
            "bind 127.0.0.1\n"
            f"dir {self.root}\n"
            f"sentinel monitor {SERVICE} 127.0.0.1 {self.ports['r1']} 1\n"
            f"sentinel down-after-milliseconds {SERVICE} {DOWN_AFTER_MS}\n"
            f"sentinel failover-timeout {SERVICE} {FAILOVER_TIMEOUT_MS}\n"
            f"sentinel parallel-syncs {SERVICE} 1\n"
        )
        self._spawn("sentinel", [self.sentinel_bin, str(conf)])
        self.wait(lambda: self._replicas_known() >= 1, "the sentinel to know the replica")

    def _server(self, name: str, replica_of: int | None = None) -> None:
        args = [
            self.server_bin,
            "--port", str(self.ports[name]),
            "--bind", "127.0.0.1",
            "--save", "",
            "--appendonly", "no",
            "--protected-mode", "no",
            "--dir", str(self.root),
            "--dbfilename", f"{name}.rdb",
            "--repl-diskless-sync-delay", "0",
        ]  # fmt: skip
        if replica_of is not None:
            args += ["--replicaof", "127.0.0.1", str(replica_of)]
        self._spawn(name, args)
        self.wait(lambda: self._cli(self.ports[name], "PING") == "PONG", f"{name} to answer")

    def restart(self, name: str) -> None:
        """Start a killed server again, empty, as a replica of the current primary (as its
        host's configuration would, rewritten by Sentinel; Sentinel alone would take a
        further 10 s or so to convert it)."""
        primary = self.primary()
        self._server(name, replica_of=self.ports[primary] if primary else None)

    # -- roles ------------------------------------------------------------------------

    def primary(self) -> str | None:
        """The server the sentinel names as primary, once that server says so too."""
        answer = self._cli(self.sentinel_port, "SENTINEL", "get-master-addr-by-name", SERVICE)
        lines = answer.split()
        if len(lines) != 2 or not lines[1].isdigit():
            return None
        named = [name for name, port in self.ports.items() if port == int(lines[1])]
        if named and self._role(named[0]) == "master":
            return named[0]
        return None

    def replicating(self, name: str) -> bool:
        """``name`` is a replica with its link to the primary up."""
        return self._role(name) == "slave" and self._linked(name)

    def _role(self, name: str) -> str:
        for line in self._cli(self.ports[name], "INFO", "replication").splitlines():
            if line.startswith("role:"):
                return line.partition(":")[2].strip()
        return ""

    def _linked(self, name: str) -> bool:
        return "master_link_status:up" in self._cli(self.ports[name], "INFO", "replication")

    def _replicas_known(self) -> int:
        answer = self._cli(self.sentinel_port, "SENTINEL", "replicas", SERVICE)
        return answer.count("name")

    def _cli(self, port: int, *args: str) -> str:
        try:
            done = subprocess.run(
                [self.cli_bin, "-h", "127.0.0.1", "-p", str(port), *args],
                capture_output=True,
                text=True,
                timeout=5,
            )
        except subprocess.TimeoutExpired:
            return ""
        return done.stdout.strip() if done.returncode == 0 else ""
