"""Real node processes for operator-facing tests (status, metrics, logs, `pulse up`).

Each node is ``python -m node`` with the test's ``PULSE_*`` settings, its output in a file
the test can read, and its own process group so the test can signal or kill it cleanly.
``wait_until`` polls with a deadline: tests synchronise on observable state, never sleeps.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from cluster.members import MemberInfo, MemberRegistry
from cluster.settings import ClusterSettings
from cluster.status import collect

REPO = Path(__file__).resolve().parent.parent
T = TypeVar("T")


def pulse_env(settings: ClusterSettings, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PULSE_")}
    env.update(
        {
            "PULSE_DATABASE_URL": settings.database_url,
            "PULSE_REDIS_URL": settings.redis_url,
            "PULSE_SCHEMA": settings.schema,
            "PULSE_CLUSTER": settings.cluster,
            "PYTHONUNBUFFERED": "1",
        }
    )
    env.update(extra)
    return env


def wait_until(
    probe: Callable[[], T | None], timeout_s: float, what: str, interval_s: float = 0.2
) -> T:
    """Call ``probe`` until it returns something truthy; fail with ``what`` at the deadline."""
    deadline = time.monotonic() + timeout_s
    last: T | None = None
    while time.monotonic() < deadline:
        last = probe()
        if last:
            return last
        time.sleep(interval_s)
    raise AssertionError(f"timed out after {timeout_s}s waiting for {what} (last: {last!r})")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@dataclass
class NodeProc:
    node_id: str
    proc: subprocess.Popen[bytes]
    log: Path

    def lines(self) -> list[str]:
        return self.log.read_text("utf-8", "replace").splitlines()

    def signal(self, sig: signal.Signals) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, sig)

    def stop(self, timeout_s: float = 40.0, *, signalled: bool = False) -> int:
        """SIGTERM (once: a second one makes a node exit at once), wait, then SIGKILL."""
        if not signalled and self.proc.poll() is None:
            self.signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            self.signal(signal.SIGKILL)
            return self.proc.wait(5)


@dataclass
class Nodes:
    """Starts nodes for one test and makes sure none outlives it."""

    settings: ClusterSettings
    workdir: Path
    started: list[NodeProc] = field(default_factory=list)

    def start(
        self,
        node_id: str,
        zone: str = "a",
        *args: str,
        global_args: tuple[str, ...] = (),
        wait: bool = True,
    ) -> NodeProc:
        """Start a node; with ``wait``, return once it is a member with a lock session.

        Starting nodes one by one also keeps their start-up checks apart (two nodes that
        probe their lock session at the same instant can collide).
        """
        log = self.workdir / f"{node_id}.log"
        argv = [sys.executable, "-m", "node", *global_args, "node", "--node-id", node_id]
        argv += ["--zone", zone, "--drain-timeout", "5s", *args]
        with log.open("wb") as out:
            proc = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                env=pulse_env(self.settings),
                cwd=REPO,
                start_new_session=True,
            )
        node = NodeProc(node_id, proc, log)
        self.started.append(node)
        if wait:
            wait_until(lambda: self._joined(node), 30, f"{node_id} to join")
        return node

    def _joined(self, node: NodeProc) -> bool:
        if node.proc.poll() is not None:
            tail = "\n".join(node.lines()[-20:])
            raise AssertionError(f"{node.node_id} exited with {node.proc.returncode}:\n{tail}")
        st = asyncio.run(collect(self.settings))
        return any(m.node_id == node.node_id and m.has_session for m in st.members)

    def stop_all(self) -> None:
        running = [n for n in self.started if n.proc.poll() is None]
        for node in running:
            node.signal(signal.SIGTERM)
        for node in running:
            node.stop(signalled=True)


@contextlib.contextmanager
def ghost_member(settings: ClusterSettings, node_id: str) -> Iterator[None]:
    """A member that heartbeats in Redis and has a Postgres session but locks nothing."""
    import psycopg

    stop = threading.Event()

    async def beat() -> None:
        registry = MemberRegistry(settings)
        info = MemberInfo(node_id, "z", "ghost", 0, "", "ghost", 1)
        try:
            while not stop.is_set():
                await registry.heartbeat(info, 5.0)
                await asyncio.sleep(0.3)
            await registry.deregister(node_id)
        finally:
            await registry.close()

    thread = threading.Thread(target=lambda: asyncio.run(beat()), daemon=True)
    with psycopg.connect(settings.database_url, application_name=node_id, autocommit=True):
        thread.start()
        try:
            yield
        finally:
            stop.set()
            thread.join(10)


def init_cluster(settings: ClusterSettings, *specs: Any, shards: int = 16) -> None:
    """Create the schema with ``shards`` shards and add the given job specs."""
    from cluster.store.jobs import JobStore

    async def go() -> None:
        async with JobStore.open(settings) as store:
            await store.init(shards)
            for spec in specs:
                await store.add(spec)

    asyncio.run(go())
