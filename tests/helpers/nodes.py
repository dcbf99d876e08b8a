"""Real node processes for tests, started as Pulse starts them (``cluster.local.processes``).

``Nodes`` starts nodes against one test's schema and Redis prefix (``PULSE_*`` from the
``settings`` fixture), with the witness handler writing to a file in the test's folder,
each node's output in its own log file there, and each node in its own process group so
the test can signal or kill it cleanly; none outlives the test. Also: a ghost member, whether
a process is gone, and a fresh cluster with some jobs.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cluster.health.status import collect
from cluster.local.processes import Command, Process, node_argv, pulse_env, stop_all
from cluster.members import MemberInfo, MemberRegistry
from cluster.settings import ClusterSettings
from tests.helpers import REPO
from tests.helpers.waiting import until


@dataclass
class Nodes:
    """Starts nodes for one test and makes sure none outlives it."""

    settings: ClusterSettings
    workdir: Path
    drain_timeout: str = "5s"
    started: list[Process] = field(default_factory=list)

    @property
    def witness(self) -> Path:
        return self.workdir / "witness.jsonl"

    def start(
        self,
        node_id: str,
        zone: str = "a",
        *args: str,
        global_args: tuple[str, ...] = (),
        wait: bool = True,
        tree: Path = REPO,
    ) -> Process:
        """Start a node of the code in ``tree`` (another release's, unpacked); with ``wait``,
        return once it is a member with a lock session.

        Starting nodes one by one also keeps their start-up checks apart (two nodes that
        probe their lock session at the same instant can collide).
        """
        argv = node_argv(
            node_id, zone, "--drain-timeout", self.drain_timeout, *args, shared=global_args
        )
        env = pulse_env(self.settings, PULSE_WITNESS_FILE=str(self.witness))
        if tree != REPO:
            env["PYTHONPATH"] = str(tree)
        node = Command(argv, env, tree).start(node_id, self.workdir / f"{node_id}.log")
        self.started.append(node)
        if wait:
            until(lambda: self._joined(node), f"{node_id} to join", 30)
        return node

    def node(self, node_id: str) -> Process:
        """The node started last under ``node_id``."""
        return next(n for n in reversed(self.started) if n.name == node_id)

    def _joined(self, node: Process) -> bool:
        if not node.running:
            raise _died(node)
        st = asyncio.run(collect(self.settings))
        return any(m.node_id == node.name and m.has_session for m in st.members)

    def check_alive(self) -> None:
        """Fail, with its log, if a node has ended other than by a clean stop."""
        for node in self.started:
            if not node.running and node.proc.returncode != 0:
                raise _died(node)

    def stop(self, node_id: str, timeout_s: float = 40.0) -> int:
        """SIGTERM one node (once: a second signal makes it exit at once), wait for it to
        drain, SIGKILL it after ``timeout_s``; its exit code."""
        return self.node(node_id).stop(timeout_s)

    def stop_all(self, timeout_s: float = 40.0) -> dict[str, int]:
        """Stop every running node at once; their exit codes."""
        return stop_all(self.started, timeout_s)

    def close(self) -> None:
        """Kill every node still running (teardown: whatever the test did)."""
        for node in self.started:
            node.signal(signal.SIGKILL)
        for node in self.started:
            node.wait(10)

    def logs(self) -> str:
        return "\n".join(f"--- {n.name}\n{n.tail()}" for n in self.started)


def _died(node: Process) -> AssertionError:
    return AssertionError(f"{node.name} exited with {node.proc.returncode}:\n{node.tail(20)}")


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


def pid_gone(pid: int) -> bool:
    """The process has exited (a zombie not reaped yet counts as exited)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().split()[2] == "Z"  # exited, not reaped yet
    except FileNotFoundError:
        return True


def init_cluster(settings: ClusterSettings, *specs: Any, shards: int = 16) -> None:
    """Create the schema with ``shards`` shards and add the given job specs, in one apply as
    a job file would: every job is planned from one reading of the clock, so jobs with the
    same schedule share their first slot. Added one by one, each read the clock again, and
    a chain added across a second's turn gave its upstream a slot its downstreams never had
    (tests/integration/test_cluster_setup.py)."""
    from cluster.store.jobstore.store import JobStore

    async def go() -> None:
        async with JobStore.open(settings) as store:
            await store.init(shards)
            if specs:
                await store.definitions.apply(list(specs))

    asyncio.run(go())
