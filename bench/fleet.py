"""The processes under test: Pulse nodes and baseline workers.

A node is started as ``pulse node`` is (``cluster.local.processes``); a baseline worker is
``python -m bench.baseline``, started the same way. Both run from the repository root,
with the trial's cluster in their ``PULSE_*`` settings, the witness file in
``PULSE_WITNESS_FILE``, their output in a log file of the work folder, in their own process
group, and get SIGTERM from Linux if the benchmark itself dies.
"""

from __future__ import annotations

import signal
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

from cluster.local.processes import Command, Process, node_argv, pulse_env, stop_all
from cluster.settings import ClusterSettings

REPO = Path(__file__).resolve().parent.parent
STOP_TIMEOUT_S = 20.0


# Set by ``python -m bench --otel``: what every Pulse node's environment gets besides.
NODE_ENV: dict[str, str] = {}


class Fleet:
    """The processes of one (scenario, system) run."""

    def __init__(self, settings: ClusterSettings, workdir: Path, witness: Path, label: str) -> None:
        self.settings = settings
        self.label = label
        self.workdir = workdir
        self.witness = witness
        self.procs: dict[str, Process] = {}

    def _start(self, name: str, argv: Sequence[str], **extra: str) -> Process:
        env = pulse_env(self.settings, PULSE_WITNESS_FILE=str(self.witness)) | extra
        log = self.workdir / f"{self.label}-{name}.log"
        proc = self.procs[name] = Command(argv, env, REPO).start(name, log)
        return proc

    def start_node(
        self,
        node_id: str,
        zone: str,
        concurrency: int,
        metrics_port: int | None = None,
        extra: Sequence[str] = (),
        env: Mapping[str, str] | None = None,
    ) -> Process:
        """``extra`` options on its command line, ``env`` in its environment."""
        options = ["--concurrency", str(concurrency), *extra]
        if metrics_port is not None:
            options += ["--metrics-port", str(metrics_port)]
        argv = node_argv(node_id, zone, *options)
        return self._start(node_id, argv, **{**NODE_ENV, **(env or {})})

    def start_baseline(self, name: str, limit: int) -> Process:
        argv = [sys.executable, "-m", "bench.baseline", "--name", name, "--limit", str(limit)]
        return self._start(name, argv, PULSE_BENCH_CLAIM_LOG=str(self.claim_log(name)))

    def claim_log(self, name: str) -> Path:
        """Where baseline worker ``name`` writes its claim times when it stops."""
        return self.workdir / f"{self.label}-{name}.claims"

    def pids(self) -> list[int]:
        return [p.pid for p in self.procs.values() if p.running]

    def signal(self, name: str, sig: signal.Signals) -> None:
        self.procs[name].signal(sig)

    def stop_all(self, timeout_s: float = STOP_TIMEOUT_S) -> dict[str, int]:
        """SIGTERM every process, wait for them to drain, SIGKILL the rest."""
        return stop_all(self.procs.values(), timeout_s)
