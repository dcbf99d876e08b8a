"""Starting and stopping the processes under test: Pulse nodes and baseline workers.

A node is ``python -m node node`` (what ``pulse node`` runs); a baseline worker is
``python -m bench.baseline``. Both run from the repository root (so the witness handler
``cluster.chaos.witness:record`` imports), in their own session, with their output in a log file,
and get SIGTERM from Linux if the benchmark itself dies.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from cluster.settings import ClusterSettings

REPO = Path(__file__).resolve().parent.parent
STOP_TIMEOUT_S = 20.0
_PR_SET_PDEATHSIG = 1


def _die_with_parent() -> Callable[[], None] | None:
    name = ctypes.util.find_library("c")
    if not sys.platform.startswith("linux") or name is None:
        return None
    prctl = ctypes.CDLL(name, use_errno=True).prctl

    def hook() -> None:
        prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)

    return hook


@dataclass
class Proc:
    name: str
    popen: subprocess.Popen[bytes]
    log: Path
    started: float

    @property
    def pid(self) -> int:
        return self.popen.pid

    @property
    def alive(self) -> bool:
        return self.popen.poll() is None


class Fleet:
    """The processes of one (scenario, system) run."""

    def __init__(self, settings: ClusterSettings, workdir: Path, witness: Path, label: str) -> None:
        self.settings = settings
        self.label = label
        self.workdir = workdir
        self.witness = witness
        self.procs: dict[str, Proc] = {}

    def _env(self) -> Mapping[str, str]:
        env = dict(os.environ)
        env.update(
            {
                "PULSE_DATABASE_URL": self.settings.database_url,
                "PULSE_REDIS_URL": self.settings.redis_url,
                "PULSE_SCHEMA": self.settings.schema,
                "PULSE_CLUSTER": self.settings.cluster,
                "PULSE_WITNESS_FILE": str(self.witness),
                "PYTHONUNBUFFERED": "1",
            }
        )
        return env

    def _spawn(self, name: str, argv: list[str], env: Mapping[str, str] | None = None) -> Proc:
        log = self.workdir / f"{self.label}-{name}.log"
        with log.open("ab") as out:
            popen = subprocess.Popen(
                argv,
                cwd=REPO,
                env={**self._env(), **(env or {})},
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                preexec_fn=_die_with_parent(),
            )
        proc = Proc(name, popen, log, time.monotonic())
        self.procs[name] = proc
        return proc

    def start_node(
        self, node_id: str, zone: str, concurrency: int, metrics_port: int | None = None
    ) -> Proc:
        argv = [sys.executable, "-m", "node", "node", "--node-id", node_id, "--zone", zone]
        argv += ["--concurrency", str(concurrency)]
        if metrics_port is not None:
            argv += ["--metrics-port", str(metrics_port)]
        return self._spawn(node_id, argv)

    def start_baseline(self, name: str, limit: int) -> Proc:
        argv = [sys.executable, "-m", "bench.baseline", "--name", name, "--limit", str(limit)]
        return self._spawn(name, argv, {"PULSE_BENCH_CLAIM_LOG": str(self.claim_log(name))})

    def claim_log(self, name: str) -> Path:
        """Where baseline worker ``name`` writes its claim times when it stops."""
        return self.workdir / f"{self.label}-{name}.claims"

    def pids(self) -> list[int]:
        return [p.pid for p in self.procs.values() if p.alive]

    def alive_names(self) -> list[str]:
        return sorted(name for name, p in self.procs.items() if p.alive)

    def signal(self, name: str, sig: signal.Signals) -> None:
        proc = self.procs[name]
        if proc.alive:
            proc.popen.send_signal(sig)

    def wait(self, name: str, timeout_s: float = STOP_TIMEOUT_S) -> int | None:
        try:
            return self.procs[name].popen.wait(timeout_s)
        except subprocess.TimeoutExpired:
            return None

    def stop_all(self, timeout_s: float = STOP_TIMEOUT_S) -> dict[str, int]:
        """SIGTERM every process, wait for them to drain, SIGKILL the rest."""
        for proc in self.procs.values():
            if proc.alive:
                proc.popen.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + timeout_s
        codes = {}
        for name, proc in self.procs.items():
            try:
                codes[name] = proc.popen.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                proc.popen.kill()
                codes[name] = proc.popen.wait()
        return codes

    def log_tail(self, name: str, lines: int = 20) -> str:
        text = self.procs[name].log.read_text("utf-8", "replace")
        return "\n".join(text.splitlines()[-lines:])


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port
