"""What a throwaway high-availability setup (``pgha.PgFormation``, ``sentinel.SentinelSet``)
does the same way: its server processes, their life cycle, and failing its primary.

Each process runs in a session of its own from the set's temporary folder, logging to
``<log_dir>/<prefix>-<name>.log``; killing one SIGKILLs its whole process group, as if its
host were gone. Waiting polls with a deadline and stops early, naming the process, when
one the set still runs has exited with an error. The API is blocking; ``pulse chaos``
calls it from a thread.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import tempfile
import time
from abc import ABC, abstractmethod
from collections.abc import Callable
from pathlib import Path
from typing import ClassVar, Self, TypeVar

from cluster.chaos.servers.standalone import ServerError
from cluster.local.processes import poll

T = TypeVar("T")


class ServerSet(ABC):
    """Server processes by name, one of which is the primary."""

    prefix: ClassVar[str]  # of the temporary folder and of every log file
    start_timeout_s: ClassVar[float]
    poll_s: ClassVar[float]

    def __init__(self, log_dir: Path | None) -> None:
        self.root = Path(tempfile.mkdtemp(prefix=f"pulse-{self.prefix}-"))
        self.log_dir = log_dir or self.root
        self._procs: dict[str, subprocess.Popen[bytes]] = {}

    @abstractmethod
    def start(self) -> None:
        """Start every server; return once the primary and its standby are in place."""

    @abstractmethod
    def primary(self) -> str | None:
        """The name of the server taking writes, when that is certain."""

    # -- life cycle -------------------------------------------------------------------

    def _spawn(self, name: str, argv: list[str]) -> None:
        with (self.log_dir / f"{self.prefix}-{name}.log").open("ab") as log:
            self._procs[name] = subprocess.Popen(
                argv,
                stdout=log,
                stderr=log,
                stdin=subprocess.DEVNULL,
                start_new_session=True,  # the process and its children: one group to kill
                cwd=self.root,
            )

    def kill(self, name: str) -> None:
        """SIGKILL the process group of ``name``: its host is gone."""
        proc = self._procs.pop(name, None)
        if proc is None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(10)

    def close(self) -> None:
        for name in list(self._procs):
            self.kill(name)
        shutil.rmtree(self.root, ignore_errors=True)

    def __enter__(self) -> Self:
        try:
            self.start()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- failing over -----------------------------------------------------------------

    def fail_primary(self) -> tuple[str, str, float]:
        """Kill the primary's host; wait until another server is promoted and takes writes.
        Returns (old primary, new primary, seconds from the kill to the promotion)."""
        old = self.primary()
        if old is None:
            raise ServerError("no single primary to fail")
        began = time.monotonic()
        self.kill(old)
        new = self.wait(lambda: self._other_primary(old), f"a primary other than {old}")
        return old, new, time.monotonic() - began

    def _other_primary(self, old: str) -> str | None:
        found = self.primary()
        return found if found != old else None

    def wait(self, probe: Callable[[], T | None], what: str) -> T:
        def answer() -> T | None:
            found = probe()
            if not found:
                self._check_running()
            return found

        found = poll(answer, self.start_timeout_s, self.poll_s)
        if found:
            return found
        raise ServerError(f"timed out waiting for {what}; see {self.log_dir}/{self.prefix}-*.log")

    def _check_running(self) -> None:
        for name, proc in self._procs.items():
            if proc.poll() not in (None, 0):
                raise ServerError(
                    f"{name} exited with {proc.returncode}; see "
                    f"{self.log_dir}/{self.prefix}-{name}.log"
                )
