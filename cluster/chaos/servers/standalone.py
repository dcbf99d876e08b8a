"""Throwaway Postgres and Redis servers the harness can stop and restart at will.

Postgres comes from the installed server binaries (``initdb`` and ``postgres`` from
``/usr/lib/postgresql/*/bin``, or ``PULSE_PG_BIN``), with its data in a temporary folder and
durability switched off for speed. Both refuse to run as root, so under root they run as the
``postgres`` system user (``setpriv``, else ``runuser``) on a data folder that user owns.
Redis runs with persistence off, so a restart loses every key, as a Redis failover would.
"""

from __future__ import annotations

import asyncio
import contextlib
import glob
import os
import pwd
import shutil
import signal
import tempfile
import time
from pathlib import Path

from cluster.errors import PulseError
from cluster.local.processes import free_port
from cluster.store.observe.diagnostics import accepts_queries

START_TIMEOUT_S = 30.0


class ServerError(PulseError):
    """A throwaway server could not be set up or started."""


async def wait_port(port: int, timeout_s: float = START_TIMEOUT_S) -> None:
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            _, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.close()
            return
        except OSError:
            if time.monotonic() > deadline:
                raise ServerError(f"nothing listens on port {port} after {timeout_s:g}s") from None
            await asyncio.sleep(0.1)


def pg_bin_dir() -> Path:
    explicit = os.environ.get("PULSE_PG_BIN")
    candidates = [explicit] if explicit else []
    candidates += sorted(glob.glob("/usr/lib/postgresql/*/bin"), key=_version_key, reverse=True)
    found = shutil.which("postgres")
    if found:
        candidates.append(str(Path(found).parent))
    for folder in candidates:
        if (Path(folder) / "postgres").exists() and (Path(folder) / "initdb").exists():
            return Path(folder)
    raise ServerError("no postgres/initdb binaries found (set PULSE_PG_BIN to their folder)")


def _version_key(path: str) -> float:
    try:
        return float(Path(path).parent.name)
    except ValueError:
        return 0.0


def as_postgres() -> list[str]:
    """The command prefix that drops root to the ``postgres`` user (empty when not root)."""
    if os.geteuid() != 0:
        return []
    try:
        pwd.getpwnam("postgres")
    except KeyError:
        raise ServerError("running as root needs a 'postgres' system user") from None
    if shutil.which("setpriv"):
        return ["setpriv", "--reuid=postgres", "--regid=postgres", "--init-groups", "--"]
    if shutil.which("runuser"):
        return ["runuser", "-u", "postgres", "--"]
    raise ServerError("running as root needs setpriv or runuser to start Postgres")


class PostgresServer:
    """One Postgres cluster in a temporary folder, on a fixed free port across restarts."""

    def __init__(self, log_path: Path) -> None:
        self.port = free_port()
        self.log_path = log_path
        self._bin = pg_bin_dir()
        self._root = Path(tempfile.mkdtemp(prefix="pulse-chaos-pg-"))
        self._data = self._root / "data"
        self._proc: asyncio.subprocess.Process | None = None
        if os.geteuid() == 0:
            user = pwd.getpwnam("postgres")
            os.chown(self._root, user.pw_uid, user.pw_gid)

    @property
    def url(self) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/postgres"

    async def _run(self, *args: str) -> None:
        with self.log_path.open("ab") as log:
            proc = await asyncio.create_subprocess_exec(
                *as_postgres(), *args, stdout=log, stderr=log, stdin=asyncio.subprocess.DEVNULL
            )
            if await proc.wait() != 0:
                raise ServerError(f"{Path(args[0]).name} failed; see {self.log_path}")

    async def start(self) -> None:
        if not self._data.exists():
            await self._run(
                str(self._bin / "initdb"),
                "-D",
                str(self._data),
                "-U",
                "postgres",
                "-A",
                "trust",
                "-E",
                "UTF8",
                "--no-sync",
            )
        settings = {
            "listen_addresses": "127.0.0.1",
            "unix_socket_directories": str(self._root),
            # Speed without lying to the nodes: without fsync a commit still reaches the OS
            # before it is acknowledged, so it survives the Postgres crashes the harness
            # causes (only an OS crash could lose it). synchronous_commit=off would not:
            # an immediate shutdown loses acknowledged commits, which nodes rightly trust.
            "fsync": "off",
            "full_page_writes": "off",
            "max_connections": "300",
        }
        args = [str(self._bin / "postgres"), "-D", str(self._data), "-p", str(self.port)]
        for key, value in settings.items():
            args += ["-c", f"{key}={value}"]
        with self.log_path.open("ab") as log:
            self._proc = await asyncio.create_subprocess_exec(
                *as_postgres(), *args, stdout=log, stderr=log, stdin=asyncio.subprocess.DEVNULL
            )
        await wait_port(self.port)
        await self._wait_ready()

    async def _wait_ready(self) -> None:
        """Until Postgres accepts queries (it listens before crash recovery ends)."""
        deadline = time.monotonic() + START_TIMEOUT_S
        while (problem := await accepts_queries(self.url)) is not None:
            if time.monotonic() > deadline:
                raise ServerError(f"Postgres is not ready: {problem}")
            await asyncio.sleep(0.1)

    async def stop(self, mode: str = "fast") -> None:
        """``fast`` (SIGINT: clean shutdown) or ``immediate`` (SIGQUIT: like a crash)."""
        proc, self._proc = self._proc, None
        if proc is None or proc.returncode is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            proc.send_signal(signal.SIGQUIT if mode == "immediate" else signal.SIGINT)
        try:
            await asyncio.wait_for(proc.wait(), 20.0)
        except TimeoutError:
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            await proc.wait()

    async def close(self) -> None:
        await self.stop("immediate")
        shutil.rmtree(self._root, ignore_errors=True)


class RedisServer:
    """One ``redis-server`` without persistence, on a fixed free port across restarts."""

    def __init__(self, log_path: Path) -> None:
        self.port = free_port()
        self.log_path = log_path
        self._binary = shutil.which("redis-server")
        if self._binary is None:
            raise ServerError("redis-server is not installed")
        self._proc: asyncio.subprocess.Process | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    async def start(self) -> None:
        assert self._binary is not None
        args = [
            self._binary,
            "--port",
            str(self.port),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
            "--protected-mode",
            "no",
            "--daemonize",
            "no",
        ]
        with self.log_path.open("ab") as log:
            self._proc = await asyncio.create_subprocess_exec(
                *args, stdout=log, stderr=log, stdin=asyncio.subprocess.DEVNULL
            )
        await wait_port(self.port)

    async def stop(self) -> None:
        """SIGKILL: Redis loses everything, as after a crash or a failover."""
        proc, self._proc = self._proc, None
        if proc is None or proc.returncode is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            proc.kill()
        await proc.wait()

    async def close(self) -> None:
        await self.stop()
