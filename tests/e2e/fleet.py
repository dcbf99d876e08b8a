"""Real ``pulse node`` processes for end-to-end tests, and what they leave behind.

A ``Fleet`` starts nodes against one test's schema and Redis prefix (``PULSE_*`` from the
``settings`` fixture), with the witness handler writing to a file in the test's tmp dir,
each node's output in its own log file, and each node in its own process group. Tests wait
on observable state (``wait_until`` polls with a deadline), never on fixed sleeps, and
``Fleet.close`` kills whatever is still running, whatever happened.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, TypeVar

import psycopg
from psycopg.rows import dict_row

from cluster.settings import ClusterSettings
from cluster.store.queries import query
from tests.nodeprocs import pulse_env

REPO = Path(__file__).resolve().parents[2]
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
US = timedelta(microseconds=1)
T = TypeVar("T")


def pulse_command() -> list[str]:
    """The ``pulse`` console script of this venv (``python -m node`` as a fallback)."""
    script = Path(sys.executable).with_name("pulse")
    return [str(script)] if script.exists() else [sys.executable, "-m", "node"]


@dataclass
class NodeProcess:
    node_id: str
    zone: str
    proc: subprocess.Popen[bytes]
    log: Path

    @property
    def running(self) -> bool:
        return self.proc.poll() is None

    def tail(self, lines: int = 30) -> str:
        text = self.log.read_text("utf-8", "replace").splitlines()
        return "\n".join(text[-lines:])

    def signal(self, sig: int) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, sig)

    def wait(self, timeout_s: float) -> int:
        try:
            return self.proc.wait(timeout_s)
        except subprocess.TimeoutExpired as exc:
            raise AssertionError(
                f"{self.node_id} still running after {timeout_s:g}s:\n{self.tail()}"
            ) from exc


@dataclass(frozen=True)
class Execution:
    """One line of the witness file: a handler call."""

    job: str
    slot: datetime
    attempt: int
    node: str
    at: float

    @property
    def lag_s(self) -> float:
        return self.at - self.slot.timestamp()


@dataclass
class Fleet:
    settings: ClusterSettings
    workdir: Path
    nodes: dict[str, NodeProcess] = field(default_factory=dict)

    @property
    def witness(self) -> Path:
        return self.workdir / "witness.jsonl"

    def env(self) -> dict[str, str]:
        return pulse_env(self.settings, PULSE_WITNESS_FILE=str(self.witness))

    def start(self, node_id: str, zone: str, *args: str) -> NodeProcess:
        log = self.workdir / f"{node_id}.log"
        argv = [*pulse_command(), "node", "--node-id", node_id, "--zone", zone]
        argv += ["--drain-timeout", "10s", *args]
        with log.open("ab") as out:
            proc = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                env=self.env(),
                cwd=REPO,  # so the handler module tests.witness imports
                start_new_session=True,
            )
        node = NodeProcess(node_id, zone, proc, log)
        self.nodes[node_id] = node
        return node

    def check_alive(self) -> None:
        for node in self.nodes.values():
            if not node.running and node.proc.returncode != 0:
                raise AssertionError(
                    f"{node.node_id} exited with {node.proc.returncode}:\n{node.tail()}"
                )

    def stop(self, node_id: str, timeout_s: float = 40.0) -> int:
        """SIGTERM one node (once: a second signal makes it exit at once) and wait."""
        node = self.nodes[node_id]
        node.signal(signal.SIGTERM)
        return node.wait(timeout_s)

    def stop_all(self, timeout_s: float = 40.0) -> dict[str, int]:
        running = [n for n in self.nodes.values() if n.running]
        for node in running:
            node.signal(signal.SIGTERM)
        return {node.node_id: node.wait(timeout_s) for node in running}

    def close(self) -> None:
        """Kill every node still running (teardown: whatever the test did)."""
        for node in self.nodes.values():
            if node.running:
                node.signal(signal.SIGKILL)
        for node in self.nodes.values():
            with contextlib.suppress(subprocess.TimeoutExpired):
                node.proc.wait(10)

    def logs(self) -> str:
        return "\n".join(f"--- {n.node_id}\n{n.tail()}" for n in self.nodes.values())

    # -- what the nodes did -----------------------------------------------------------

    def executions(self) -> list[Execution]:
        if not self.witness.exists():
            return []
        found = []
        for line in self.witness.read_text("utf-8").splitlines():
            if not line.strip():
                continue
            row = json.loads(line)
            found.append(
                Execution(
                    row["job"],
                    datetime.fromisoformat(row["slot"]),
                    row["attempt"],
                    row["node"],
                    row["at"],
                )
            )
        return found

    def sql(self, statement: str | bytes, params: Any = None) -> list[dict[str, Any]]:
        with psycopg.connect(
            self.settings.database_url,
            autocommit=True,
            row_factory=dict_row,
            options=f"-c search_path={self.settings.schema}",
            application_name="e2e-observer",
        ) as conn:
            return conn.execute(statement, params).fetchall()  # type: ignore[arg-type]

    def holders(self) -> dict[int, str]:
        """Shard -> node id holding its advisory lock, as pg_locks shows it."""
        rows = self.sql(query("shard_holders"), {"ns": self.settings.lock_namespace})
        return {row["shard"]: row["node_id"] for row in rows}

    def shards_per_node(self) -> Counter[str]:
        return Counter(self.holders().values())


def every_slots(every_s: int, start: datetime, end: datetime) -> list[datetime]:
    """The ``@every <every_s>s`` slots in [start, end]: multiples of the interval since the
    Unix epoch."""
    step_us = every_s * 1_000_000
    first = -(-((start - EPOCH) // US) // step_us)
    last = ((end - EPOCH) // US) // step_us
    return [EPOCH + timedelta(seconds=i * every_s) for i in range(first, last + 1)]


def doubles(executions: Iterable[Execution]) -> list[tuple[str, datetime, int]]:
    """(job, slot) pairs executed more than once, with their count."""
    counts = Counter((e.job, e.slot) for e in executions)
    return sorted((job, slot, n) for (job, slot), n in counts.items() if n > 1)
