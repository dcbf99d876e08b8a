"""Starting Pulse node processes, and other commands the same way.

A node is ``python -m node [shared options] node --node-id ID --zone ZONE [options]``,
which is what ``pulse node`` runs. Its environment is the caller's without any ``PULSE_*``
variable (unless inherited on purpose), plus the ``PULSE_*`` settings of one
``ClusterSettings``, ``PYTHONUNBUFFERED`` and any extras.

Every child runs in a session, hence a process group, of its own: a terminal's Ctrl-C
reaches only its parent, which signals each group itself (a second SIGTERM makes a node
exit at once, so a stop sends one). On Linux a child also gets SIGTERM when the thread
that started it dies, so start children from a thread that lives as long as they should.
Output goes to a log file, appended to, or to a pipe.

``Command.start`` starts one with ``subprocess`` and returns a ``Process`` (benchmarks,
tests); ``Command.start_async`` with asyncio (``pulse up``, ``pulse chaos``). ``poll``
waits, with a deadline, for what a child does to become visible.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import ctypes.util
import functools
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Protocol, TypedDict, TypeVar

from cluster.settings import ClusterSettings

T = TypeVar("T")
STOP_TIMEOUT_S = 40.0
KILL_WAIT_S = 10.0
# Settings that name one node: each node gets its own on its command line, never the
# caller's, even when the caller's other PULSE_* variables are inherited.
NODE_ONLY = ("PULSE_NODE_ID", "PULSE_ZONE", "PULSE_METRICS_PORT")
_PR_SET_PDEATHSIG = 1


def node_argv(
    node_id: str, zone: str, *options: str, shared: Sequence[str] = ()
) -> tuple[str, ...]:
    """The command line of one node; ``shared`` options go before the sub-command."""
    return (
        sys.executable, "-m", "node", *shared,
        "node", "--node-id", node_id, "--zone", zone, *options,
    )  # fmt: skip


def pulse_env(settings: ClusterSettings, *, inherit: bool = False, **extra: str) -> dict[str, str]:
    """The environment of a Pulse process of the cluster ``settings``.

    The caller's ``PULSE_*`` variables are left out, so a developer's shell cannot change
    what a harness starts; with ``inherit`` they pass, except ``NODE_ONLY``.
    """
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("PULSE_") or (inherit and k not in NODE_ONLY)
    }
    env.update(
        PULSE_DATABASE_URL=settings.database_url,
        PULSE_REDIS_URL=settings.redis_url,
        PULSE_SCHEMA=settings.schema,
        PULSE_CLUSTER=settings.cluster,
        PYTHONUNBUFFERED="1",
    )
    env.update(extra)
    return env


@functools.cache
def _prctl() -> Callable[..., int] | None:
    if not sys.platform.startswith("linux"):
        return None
    name = ctypes.util.find_library("c")
    if name is None:
        return None
    prctl: Callable[..., int] = ctypes.CDLL(name, use_errno=True).prctl
    return prctl


def parent_death_hook(sig: int = signal.SIGTERM) -> Callable[[], None] | None:
    """A ``preexec_fn`` asking Linux to send ``sig`` to the child when its parent dies.

    libc is resolved here, in the parent: the hook runs between fork and exec, where only
    the simplest calls are safe.
    """
    prctl = _prctl()
    if prctl is None:
        return None

    def hook() -> None:
        prctl(_PR_SET_PDEATHSIG, sig, 0, 0, 0)

    return hook


class _Spawn(TypedDict):
    stdin: int
    stdout: int | IO[bytes]
    stderr: int
    env: dict[str, str]
    cwd: Path | None
    start_new_session: bool
    preexec_fn: Callable[[], None] | None


@dataclass(frozen=True)
class Command:
    """What to start: the argv, its whole environment and its working directory."""

    argv: Sequence[str]
    env: Mapping[str, str]
    cwd: Path | None = None

    @contextlib.contextmanager
    def _spawn(self, log: Path | None) -> Iterator[_Spawn]:
        with contextlib.ExitStack() as stack:
            out = subprocess.PIPE if log is None else stack.enter_context(log.open("ab"))
            yield _Spawn(
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                env=dict(self.env),
                cwd=self.cwd,
                start_new_session=True,
                preexec_fn=parent_death_hook(),
            )

    def start(self, name: str, log: Path | None = None) -> Process:
        """Start it (output appended to ``log``, else piped) and return its handle."""
        with self._spawn(log) as options:
            return Process(name, subprocess.Popen(self.argv, **options), log)

    async def start_async(
        self, log: Path | None = None, *, limit: int = 1 << 16
    ) -> asyncio.subprocess.Process:
        """The asyncio flavour of ``start``; ``limit`` bounds a line read from the pipe."""
        with self._spawn(log) as options:
            return await asyncio.create_subprocess_exec(*self.argv, limit=limit, **options)


class _Child(Protocol):
    @property
    def pid(self) -> int: ...

    @property
    def returncode(self) -> int | None: ...


def signal_group(child: _Child, sig: int) -> None:
    """Send ``sig`` to the process group of a child not yet reaped (its pid is still its
    own then); a group that is gone already is no error."""
    if child.returncode is None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(child.pid, sig)


@dataclass
class Process:
    """A child started by ``Command.start``."""

    name: str
    proc: subprocess.Popen[bytes]
    log: Path | None = None
    started: float = field(default_factory=time.monotonic)

    @property
    def pid(self) -> int:
        return self.proc.pid

    @property
    def running(self) -> bool:
        return self.proc.poll() is None

    def signal(self, sig: int) -> None:
        signal_group(self.proc, sig)

    def wait(self, timeout_s: float) -> int | None:
        """Its exit code, or None if it is still running after ``timeout_s``."""
        try:
            return self.proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            return None

    def stop(self, timeout_s: float = STOP_TIMEOUT_S) -> int:
        """SIGTERM, wait up to ``timeout_s`` for it to drain, then SIGKILL; its exit code."""
        return stop_all([self], timeout_s).get(self.name, self.proc.returncode)

    def lines(self) -> list[str]:
        if self.log is None or not self.log.exists():
            return []
        return self.log.read_text("utf-8", "replace").splitlines()

    def tail(self, count: int = 30) -> str:
        return "\n".join(self.lines()[-count:])


def stop_all(processes: Iterable[Process], timeout_s: float = STOP_TIMEOUT_S) -> dict[str, int]:
    """SIGTERM every running process once, let them drain until one shared deadline, SIGKILL
    the rest; the exit codes of those that were running, by name."""
    running = [p for p in processes if p.running]
    for process in running:
        process.signal(signal.SIGTERM)
    deadline = time.monotonic() + timeout_s
    codes = {}
    for process in running:
        code = process.wait(max(0.1, deadline - time.monotonic()))
        if code is None:
            process.signal(signal.SIGKILL)
            code = process.proc.wait(KILL_WAIT_S)
        codes[process.name] = code
    return codes


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now, for a child to listen on."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def poll(probe: Callable[[], T | None], timeout_s: float, interval_s: float) -> T | None:
    """Call ``probe`` every ``interval_s`` until it returns something truthy, for at most
    ``timeout_s``: that answer, else the last one (``None`` if it was never asked)."""
    deadline = time.monotonic() + timeout_s
    last: T | None = None
    while time.monotonic() < deadline:
        last = probe()
        if last:
            return last
        time.sleep(interval_s)
    return last
