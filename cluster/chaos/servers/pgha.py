"""A throwaway pg_auto_failover formation: a monitor and two Postgres nodes on local ports.

Pulse's failover guarantees are tested against a real primary switch, not a simulation:
``pg_autoctl`` (Debian's ``pg-auto-failover-cli`` and ``postgresql-15-auto-failover``,
installed when missing) creates a monitor and a primary, then a secondary by base backup,
with the formation's defaults: one synchronous standby (``synchronous_standby_names`` is
``ANY 1 (...)`` while the secondary is up), so a commit acknowledged to a node is on both
servers (``synchronous=False`` takes every node out of the write quorum: asynchronous
replication, which can lose the last commits). ``pg_autoctl`` refuses to run as root;
under root every process runs as the ``postgres`` user on a folder it owns. Its
configuration and state live in the folder too (``XDG_*``), never in a home directory.

Each node's keeper runs in a process group of its own with its Postgres, so ``kill``
takes a whole host down (killing Postgres alone would only make its keeper restart it).
The monitor's health checks are tightened (1 s period, unhealthy after 2 s, 3 s for the
lost primary to demote itself) so a failover takes seconds, not the default 50 or so.
Its processes, their life cycle and the wait for a promotion are ``serverset``'s; the
API is blocking, and ``pulse chaos`` calls it from a thread.
"""

from __future__ import annotations

import json
import os
import pwd
import socket
import subprocess
import time
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from cluster.chaos.servers.packages import ensure_command
from cluster.chaos.servers.serverset import ServerSet
from cluster.chaos.servers.standalone import ServerError, as_postgres, pg_bin_dir
from cluster.local.processes import free_port

PACKAGES = ("pg-auto-failover-cli", "postgresql-15-auto-failover")
START_TIMEOUT_S = 60.0
COMMAND_TIMEOUT_S = 60.0
POLL_S = 0.2
# Health checks of the monitor, in ms: how fast a dead primary is noticed.
MONITOR_SETTINGS = {
    "pgautofailover.health_check_period": "1000",
    "pgautofailover.health_check_timeout": "1000",
    "pgautofailover.health_check_max_retries": "1",
    "pgautofailover.health_check_retry_delay": "500",
    "pgautofailover.node_considered_unhealthy_timeout": "2000",
    "pgautofailover.startup_grace_period": "1000",
    # How long the secondary waits, once promoted, for the lost primary to have demoted
    # itself before taking writes (30 s by default): a killed host has nothing to demote.
    "pgautofailover.primary_demote_timeout": "3000",
}
# Speed without lying: a commit still reaches the OS (and the synchronous standby) before
# it is acknowledged; only an OS crash could lose it, and the harness causes none.
NODE_SETTINGS = {"fsync": "off", "full_page_writes": "off", "max_connections": "200"}


@dataclass(frozen=True)
class NodeState:
    """One Postgres node as the monitor sees it."""

    name: str
    port: int
    reported: str
    assigned: str

    @property
    def is_primary(self) -> bool:
        """Accepting writes: ``single`` (no standby yet), ``primary``, or ``wait_primary``
        (its standby gone, so no longer waiting on one)."""
        primary = ("single", "primary", "wait_primary")
        return self.reported in primary and self.reported == self.assigned


@dataclass(frozen=True)
class LossySpan:
    """A span, in epoch seconds, in which ``primary`` acknowledged commits alone (its standby
    out of the write quorum: ``wait_primary``) and which ended with another node promoted.
    What it acknowledged in it may be missing on the new primary."""

    primary: str
    began: float
    ended: float


def lossy_spans_in(events: list[dict[str, object]]) -> list[LossySpan]:
    """The lossy spans in the monitor's events (``pg_autoctl show events --json``)."""
    alone: dict[str, float] = {}  # node -> when its goal became wait_primary
    spans = []
    for event in sorted(events, key=lambda e: int(str(e["eventid"]))):
        node = str(event["nodename"])
        at = datetime.fromisoformat(str(event["eventtime"])).timestamp()
        if event["goalstate"] == "wait_primary":
            alone.setdefault(node, at)
        if event["reportedstate"] == "primary" and event["goalstate"] == "primary":
            alone.pop(node, None)
        if event["reportedstate"] in ("wait_primary", "primary"):
            for old in [n for n in alone if n != node]:
                spans.append(LossySpan(old, alone.pop(old), at))
    return spans


class PgFormation(ServerSet):
    """A monitor and nodes ``n1`` (the first primary) and ``n2``, each on a free port."""

    prefix = "pgha"
    start_timeout_s = START_TIMEOUT_S
    poll_s = POLL_S

    def __init__(self, log_dir: Path | None = None, *, synchronous: bool = True) -> None:
        self.synchronous = synchronous
        self.pg_autoctl = ensure_command("pg_autoctl", *PACKAGES)
        super().__init__(log_dir)
        self._pg_ctl = str(pg_bin_dir() / "pg_ctl")
        self.monitor_port = free_port()
        self.ports = {"n1": free_port(), "n2": free_port()}
        if os.geteuid() == 0:
            user = pwd.getpwnam("postgres")
            os.chown(self.root, user.pw_uid, user.pw_gid)

    # -- addresses --------------------------------------------------------------------

    @property
    def url(self) -> str:
        """The multi-host URL Pulse uses: both nodes, the writable one chosen on connect."""
        hosts = ",".join(f"127.0.0.1:{port}" for port in self.ports.values())
        return f"postgresql://postgres@{hosts}/postgres?target_session_attrs=read-write"

    def node_url(self, name: str) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.ports[name]}/postgres"

    @property
    def monitor_uri(self) -> str:
        return (
            f"postgres://autoctl_node@127.0.0.1:{self.monitor_port}/pg_auto_failover"
            "?sslmode=disable"
        )

    # -- running pg_autoctl -----------------------------------------------------------

    def _argv(self, *args: str) -> list[str]:
        env = [f"XDG_{kind}={self.root / kind.lower()}" for kind in ("CONFIG_HOME", "DATA_HOME")]
        env.append(f"XDG_RUNTIME_DIR={self.root / 'run'}")
        return [*as_postgres(), "env", *env, self.pg_autoctl, *args]

    def _run(self, *args: str, log: str) -> str:
        with (self.log_dir / f"pgha-{log}.log").open("ab") as out:
            done = subprocess.run(
                self._argv(*args),
                stdout=subprocess.PIPE,
                stderr=out,
                stdin=subprocess.DEVNULL,
                timeout=COMMAND_TIMEOUT_S,
                cwd=self.root,
            )
        if done.returncode != 0:
            raise ServerError(f"pg_autoctl {args[0]} {args[1]} failed; see {out.name}")
        return done.stdout.decode()

    def _common(self, name: str, port: int) -> list[str]:
        return [
            "--pgdata", str(self.root / name),
            "--pgport", str(port),
            "--pgctl", self._pg_ctl,
            "--hostname", "127.0.0.1",
            "--auth", "trust",
            "--no-ssl",
        ]  # fmt: skip

    def _configure(self, name: str, settings: dict[str, str]) -> None:
        with (self.root / name / "postgresql.conf").open("a") as conf:
            conf.write("".join(f"{key} = '{value}'\n" for key, value in settings.items()))

    # -- life cycle -------------------------------------------------------------------

    def start(self) -> None:
        """Create and run the monitor, then n1 (primary), then n2 (synchronous standby)."""
        self._run("create", "monitor", *self._common("monitor", self.monitor_port), log="monitor")
        self._configure("monitor", MONITOR_SETTINGS)
        self._spawn("monitor", self._argv("run", "--pgdata", str(self.root / "monitor")))
        self._wait_port(self.monitor_port)
        # Asynchronous: no node takes part in the write quorum, so synchronous_standby_names
        # stays empty and a commit is acknowledged before the standby has it.
        quorum = "true" if self.synchronous else "false"
        node = ["--monitor", self.monitor_uri, "--replication-quorum", quorum, "--name"]
        self._run(
            "create", "postgres", *self._common("n1", self.ports["n1"]), *node, "n1", log="n1"
        )
        self._configure("n1", NODE_SETTINGS)
        self._spawn("n1", self._argv("run", "--pgdata", str(self.root / "n1")))
        self.wait(lambda: self.primary() == "n1", "n1 to become primary")
        create = ["create", "postgres", *self._common("n2", self.ports["n2"]), *node, "n2"]
        self._spawn("n2", self._argv(*create, "--run"))
        self.wait(self.settled, "n1 primary and n2 its synchronous secondary")

    def restart(self, name: str) -> None:
        """Start a killed node's keeper again; it rejoins as a secondary."""
        self._spawn(name, self._argv("run", "--pgdata", str(self.root / name)))

    # -- what the monitor says --------------------------------------------------------

    def states(self) -> list[NodeState]:
        try:
            text = self._run("show", "state", "--monitor", self.monitor_uri, "--json", log="show")
            rows = json.loads(text)
        except (ServerError, ValueError, subprocess.TimeoutExpired):
            return []
        return [
            NodeState(
                name=str(row["nodename"]),
                port=int(row["nodeport"]),
                reported=str(row["current_group_state"]),
                assigned=str(row["assigned_group_state"]),
            )
            for row in rows
        ]

    def primary(self) -> str | None:
        """The node accepting writes, when the monitor agrees it does."""
        found = [s.name for s in self.states() if s.is_primary]
        return found[0] if len(found) == 1 else None

    def settled(self) -> bool:
        """One primary and one secondary, both where the monitor wants them."""
        states = self.states()
        reported = sorted(s.reported for s in states if s.reported == s.assigned)
        return reported == ["primary", "secondary"]

    def lossy_spans(self, since: float) -> list[LossySpan]:
        """The spans ending after ``since`` (epoch seconds) in which commits acknowledged to
        Pulse could be lost, read from the monitor's events. The monitor takes a standby it
        finds unhealthy out of the quorum (``wait_primary``: "Disabling synchronous
        replication"); if it then promotes that standby anyway (a switchover asked for at
        that moment), the old primary's last commits are gone once it is rebuilt from the
        new one. A primary back at ``primary`` (its standby in the quorum again), or never
        replaced, lost nothing."""
        text = self._run(
            "show", "events", "--count", "1000", "--monitor", self.monitor_uri, "--json",
            log="show",
        )  # fmt: skip
        return [span for span in lossy_spans_in(json.loads(text)) if span.ended >= since]

    # -- switching --------------------------------------------------------------------

    def switchover(self) -> float:
        """``pg_autoctl perform switchover``: the primary steps down, the secondary takes
        over. Returns the seconds it took, until both report their new roles."""
        began = time.monotonic()
        self._run("perform", "switchover", "--monitor", self.monitor_uri, log="switchover")
        self.wait(self.settled, "the formation to settle after the switchover")
        return time.monotonic() - began

    def _wait_port(self, port: int) -> None:
        def listening() -> bool:
            with socket.socket() as sock:
                return sock.connect_ex(("127.0.0.1", port)) == 0

        self.wait(listening, f"the monitor on port {port}")
