"""The compose cluster the end-to-end test drives (tests/e2e/test_compose_cluster.py): one
compose project run through `bin/compose` on free loopback ports, the commands that drive it
from the host (`pulse` through the published ports, SQL as the owner, docker), and what the
test reads back: the tick job's slots, Prometheus's answers, and on a failed ledger check
the runs, the job row and the nodes' log lines that explain it."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import psycopg

from tests.helpers.fleet import every_slots
from tests.helpers.waiting import until

REPO = Path(__file__).resolve().parents[2]
NODES = ("node-a", "node-b", "node-c")
PORTS = (
    "PUBLISH_POSTGRES",
    "PUBLISH_REDIS",
    "PUBLISH_WEB",
    "PUBLISH_PROMETHEUS",
    *(f"PUBLISH_NODE_{z}" for z in "ABC"),
)
TICK = "compose-tick"
# A stopped, killed or frozen node's shards are held again within this (5 s heartbeat TTL,
# 10 s session timeout, with room for a loaded 2-core machine).
FAILOVER_S = 60.0


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def docker_usable() -> str | None:
    """Why docker cannot be made to work here, or None."""
    if shutil.which("docker") or shutil.which("dockerd"):
        return None
    if os.geteuid() != 0 and not shutil.which("sudo"):
        return "docker is not installed and this user may not install it (not root, no sudo)"
    if not shutil.which("apt-get"):
        return "docker is not installed and there is no apt-get to install it"
    return None


@dataclass
class Cluster:
    """One compose project: its environment, and the commands to drive it from the host."""

    project: str
    env: dict[str, str]
    log: list[str] = field(default_factory=list)

    def sh(self, command: str, timeout_s: float = 900, **extra: str) -> str:
        started = time.monotonic()
        result = subprocess.run(
            ["bash", "-c", command],
            cwd=REPO,
            env={**self.env, **extra},
            capture_output=True,
            text=True,
            timeout=timeout_s,
        )
        self.log.append(f"{command}: {time.monotonic() - started:.1f}s")
        assert result.returncode == 0, f"{command}\n{result.stdout}\n{result.stderr}"
        return result.stdout

    def docker(self, *args: str) -> str:
        return self.sh(" ".join(["docker", *args]))

    def container(self, service: str) -> str:
        return self.sh(f"bin/compose ps -aq {service}").strip()

    def db_url(self) -> str:
        password = self.env["PULSE_OWNER_PASSWORD"]
        return f"postgresql://pulse:{password}@127.0.0.1:{self.env['PUBLISH_POSTGRES']}/pulse"

    def pulse(self, *args: str) -> subprocess.CompletedProcess[str]:
        env = {
            **self.env,
            "PULSE_DATABASE_URL": self.db_url(),
            "PULSE_REDIS_URL": f"redis://:{self.env['REDIS_PASSWORD']}@127.0.0.1:"
            f"{self.env['PUBLISH_REDIS']}/0",
        }
        return subprocess.run(
            [sys.executable, "-m", "node", *args],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )

    def status(self) -> dict[str, Any]:
        result = self.pulse("status", "--json")
        if not result.stdout.strip():
            return {}
        data: dict[str, Any] = json.loads(result.stdout)
        return data

    def settled(self, alive: set[str]) -> dict[str, Any] | None:
        """The status when exactly ``alive`` are members and every shard is held by one."""
        st = self.status()
        if (
            st
            and set(st["alive_nodes"]) == alive
            and st["shards_held"] == st["shard_count"]
            and not st["unheld"]
            and not st["held_by_non_members"]
        ):
            return st
        return None

    def wait_settled(self, alive: set[str], what: str) -> float:
        started = time.monotonic()
        until(lambda: self.settled(alive), what, FAILOVER_S, interval_s=0.5)
        took = time.monotonic() - started
        self.log.append(f"{what}: {took:.1f}s")
        return took

    def query(self, sql: str, *params: Any) -> list[tuple[Any, ...]]:
        with psycopg.connect(self.db_url(), autocommit=True) as conn:
            return conn.execute(sql, params).fetchall()  # type: ignore[arg-type]

    def leftovers(self) -> list[str]:
        label = f"label=com.docker.compose.project={self.project}"
        found = []
        for kind in ("ps -a", "volume ls", "network ls"):
            out = subprocess.run(
                ["bash", "-c", f"docker {kind} -q --filter {label}"],
                capture_output=True,
                text=True,
            ).stdout.split()
            found += [f"{kind}: {item}" for item in out]
        return found


def tick_slots(run: Cluster, start: datetime, end: datetime) -> tuple[list[datetime], list[Any]]:
    """The slots of [start, end] without a succeeded run, and those with more than one."""
    rows = run.query(
        "SELECT scheduled_for, count(*) FROM runs WHERE job_name = %s AND status = 'succeeded'"
        " AND scheduled_for BETWEEN %s AND %s GROUP BY scheduled_for",
        TICK,
        start,
        end,
    )
    done = {slot: n for slot, n in rows}
    missing = [slot for slot in every_slots(1, start, end) if slot not in done]
    doubled = [(slot, n) for slot, n in done.items() if n > 1]
    return missing, doubled


def why_missing(run: Cluster, first: datetime, last: datetime) -> str:
    """What the runs table, the tick job's row and the nodes' logs say about the slots of
    [first, last] without a succeeded run: the message of a failed ledger check."""
    missing, doubled = tick_slots(run, first, last)
    lines = [f"missing {len(missing)}: {[m.isoformat() for m in missing[:20]]}"]
    lines.append(f"doubled: {doubled}")
    if missing:
        lines += [
            repr(row)
            for row in run.query(
                "SELECT scheduled_for, status, attempt, node_id, origin, started_at, finished_at,"
                " last_error, history FROM runs WHERE job_name = %s AND scheduled_for BETWEEN"
                " %s AND %s ORDER BY scheduled_for",
                TICK,
                missing[0] - timedelta(seconds=3),
                missing[-1] + timedelta(seconds=3),
            )
        ]
    lines += [
        repr(row)
        for row in run.query(
            "SELECT status, next_run_at, slot_at, attempt, locked_by, locked_at, shard_id, now()"
            " FROM jobs WHERE name = %s",
            TICK,
        )
    ]
    for node in NODES:
        logs = subprocess.run(
            ["bash", "-c", f"bin/compose logs --no-color --no-log-prefix -t {node} 2>&1"],
            cwd=REPO,
            env=run.env,
            capture_output=True,
            text=True,
            timeout=120,
        ).stdout.splitlines()
        keep = ("shard", "lost", "error", "warn", "drain", "backfill", "fenc", "stop", "start")
        lines.append(f"--- {node}")
        lines += [line for line in logs if any(k in line.lower() for k in keep)][-60:]
    return "\n".join(lines)


def prometheus(run: Cluster, query: str) -> list[Any]:
    """The result of an instant query to the monitoring profile's Prometheus ([] until it
    answers)."""
    url = f"http://127.0.0.1:{run.env['PUBLISH_PROMETHEUS']}/api/v1/query?" + urlencode(
        {"query": query}
    )
    try:
        with urllib.request.urlopen(url, timeout=5) as answer:
            result: list[Any] = json.load(answer)["data"]["result"]
            return result
    except OSError:
        return []


def db_now(run: Cluster) -> datetime:
    now: datetime = run.query("SELECT now()")[0][0]
    return now
