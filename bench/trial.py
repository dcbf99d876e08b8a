"""One system under one scenario: a fresh schema, its processes, sampling and witness.

A trial owns a schema of the benchmark database (dropped afterwards), a cluster name of
its own (so Redis keys and advisory-lock namespace never collide), a witness file, the
node or baseline processes, and a /proc sampler over them and their Postgres backends.
"""

from __future__ import annotations

import asyncio
import logging
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from types import TracebackType
from typing import Any

from psycopg import sql

from bench import database as db
from bench.analysis import Counts, Fire
from bench.database import AConn, BenchDatabase
from bench.fleet import Fleet
from bench.results import Measure
from bench.sampler import Sampler
from bench.sizes import Sizes
from cluster.chaos.witness import read_witness
from cluster.local.processes import free_port

logger = logging.getLogger(__name__)

POLL_S = 0.05
SETTLE_POLL_S = 0.1
ZONES = ("a", "b", "c")


class BenchError(Exception):
    """A trial could not run as planned (a process died, a timeout passed)."""


@dataclass
class Bench:
    """What every trial of one benchmark run shares."""

    database: BenchDatabase
    workdir: Path
    tag: str
    sizes: Sizes
    profile_dir: Path | None = None


class Trial:
    def __init__(
        self,
        bench: Bench,
        scenario: str,
        system: str,
        schema: str | None = None,
        node_options: Sequence[str] = (),
        node_env: Mapping[str, str] | None = None,
    ) -> None:
        """A fresh schema of its own, or ``schema`` (kept afterwards) if given;
        ``node_options`` are added to every Pulse node's command line, ``node_env`` to its
        environment."""
        self.bench = bench
        self.node_options = tuple(node_options)
        self.node_env = dict(node_env or {})
        self.system = system
        self.name = f"{scenario}_{system}"
        self.schema = schema or self.name
        self._owns_schema = schema is None
        self.settings = bench.database.cluster(self.schema, f"{bench.tag}-{self.name}")
        self.witness = bench.workdir / f"{self.name}.witness.jsonl"
        self.fleet = Fleet(self.settings, bench.workdir, self.witness, self.name)
        self.sampler = Sampler(self.fleet.pids, self._backend_pids)
        self._conn: AConn | None = None
        self._probe: AConn | None = None
        self.metrics_ports: dict[str, int] = {}
        self._profiler: subprocess.Popen[bytes] | None = None

    @property
    def conn(self) -> AConn:
        assert self._conn is not None, "trial not entered"
        return self._conn

    async def __aenter__(self) -> Trial:
        if self._owns_schema:
            await db.init_schema(self.settings, self.bench.sizes.shards)
        self._conn = await db.control(self.settings)
        self._probe = await db.control(self.settings)
        self.sampler.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.stop()
        if self._probe is not None:
            await self._probe.close()
        if self._conn is not None and self._owns_schema:
            drop = sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(self.schema))
            await self._conn.execute(drop)
        if self._conn is not None:
            await self._conn.close()
        await db.clear_redis(self.settings)

    async def _backend_pids(self) -> list[int]:
        assert self._probe is not None
        return await db.backend_pids(self._probe, self.bench.database.name)

    # -- processes -----------------------------------------------------------------------

    def node_name(self, i: int) -> str:
        return f"{'pulse' if self.system == 'pulse' else 'base'}-{i}"

    def start(self, i: int) -> str:
        """Start process ``i`` (1-based) of this trial's system; returns its name."""
        name = self.node_name(i)
        sizes = self.bench.sizes
        if self.system == "pulse":
            port = self.metrics_ports[name] = free_port()
            zone = ZONES[(i - 1) % len(ZONES)]
            self.fleet.start_node(
                name, zone, sizes.concurrency, port, self.node_options, self.node_env
            )
        else:
            self.fleet.start_baseline(name, sizes.concurrency)
        return name

    def start_all(self) -> list[str]:
        return [self.start(i) for i in range(1, self.bench.sizes.nodes + 1)]

    def kill(self, name: str, sig: signal.Signals = signal.SIGKILL) -> float:
        self.fleet.signal(name, sig)
        return time.time()

    async def stop(self) -> None:
        if self.fleet.pids():
            started = time.monotonic()
            codes = await asyncio.to_thread(self.fleet.stop_all)
            logger.info("%s: stopped in %.1fs %s", self.name, time.monotonic() - started, codes)
        await self.sampler.stop()

    def check_alive(self, names: list[str]) -> None:
        for name in names:
            if not self.fleet.procs[name].running:
                raise BenchError(f"{name} exited early:\n{self.fleet.procs[name].tail(20)}")

    async def claim_counters(self) -> dict[str, tuple[float, float]]:
        """Per live Pulse node: (claims, seconds spent claiming) from its metrics endpoint."""
        found = {}
        for name, port in self.metrics_ports.items():
            if not self.fleet.procs[name].running:
                continue
            try:
                text = await asyncio.to_thread(_scrape, port)
            except OSError:
                continue
            values = dict(_samples(text, "pulse_claim_duration_seconds_"))
            if "count" in values and "sum" in values:
                found[name] = (values["count"], values["sum"])
        return found

    async def counter(self, name: str) -> dict[str, float]:
        """Per live Pulse node: the value of counter ``name`` (without labels)."""
        found = {}
        for node, port in self.metrics_ports.items():
            if self.fleet.procs[node].running:
                text = await asyncio.to_thread(_scrape, port)
                values = dict(_samples(text, name))
                if "" in values:
                    found[node] = values[""]
        return found

    async def claim_buckets(self) -> dict[str, dict[float, float]]:
        """Per live Pulse node: its claim-duration histogram (upper bound in seconds ->
        claims at or under it, cumulative), from its metrics endpoint."""
        found = {}
        for name, port in self.metrics_ports.items():
            if self.fleet.procs[name].running:
                text = await asyncio.to_thread(_scrape, port)
                found[name] = _buckets(text, "pulse_claim_duration_seconds_bucket")
        return found

    def baseline_claims(self, since: float, until: float) -> list[float]:
        """Seconds of each claim the stopped baseline workers started in [since, until]."""
        found = []
        for name in self.fleet.procs:
            log = self.fleet.claim_log(name)
            if log.exists():
                for line in log.read_text("ascii").splitlines():
                    at, seconds = map(float, line.split())
                    if since <= at <= until:
                        found.append(seconds)
        return found

    def profile_start(self) -> None:
        """With ``--profile``: sample the first Pulse node with py-spy (raw collapsed
        stacks, one file per trial) until ``profile_stop``. Only the thread holding the GIL
        is sampled (where the CPU goes), and the node is read without being paused, so the
        profile does not change the CPU it measures."""
        if self.bench.profile_dir is None or self.system != "pulse":
            return
        py_spy = shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))
        out = self.bench.profile_dir / f"{self.name}.txt"
        self.bench.profile_dir.mkdir(parents=True, exist_ok=True)
        pid = self.fleet.procs[self.node_name(1)].pid
        argv = [py_spy, "record", "--pid", str(pid), "--format", "raw", "--rate", "200"]
        argv += ["--gil", "--nonblocking"]
        self._profiler = subprocess.Popen(
            [*argv, "--output", str(out)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )

    def profile_stop(self) -> None:
        if self._profiler is not None:
            self._profiler.send_signal(signal.SIGINT)
            self._profiler.wait(30)
            self._profiler = None

    # -- waiting -------------------------------------------------------------------------

    async def wait_ready(self, names: list[str], timeout_s: float = 60.0) -> float:
        """Until every process is connected (baseline) or every shard is held by its ring
        owner (Pulse); returns how long that took."""
        started = time.monotonic()
        deadline = started + timeout_s
        while True:
            self.check_alive(names)
            if self.system == "pulse":
                if await self.settled(names):
                    break
            elif set(names) <= await db.connected_apps(self.conn, self.bench.database.name):
                break
            if time.monotonic() > deadline:
                raise BenchError(f"{self.name}: processes not ready after {timeout_s:g}s")
            await asyncio.sleep(SETTLE_POLL_S)
        ready_s = time.monotonic() - started
        logger.info("%s: %d processes ready in %.1fs", self.name, len(names), ready_s)
        return ready_s

    async def settled(self, members: list[str]) -> bool:
        held = await db.holders(self.conn, self.settings.lock_namespace)
        if len(held) != self.bench.sizes.shards:
            return False
        return held == db.owners(members, self.bench.sizes.shards)

    async def wait_settled(self, members: list[str], since: float) -> float | None:
        """Seconds from ``since`` (epoch) until every shard is held by its owner on the ring
        over ``members``; None if that did not happen within the settle timeout."""
        owners = db.owners(members, self.bench.sizes.shards)
        deadline = time.monotonic() + self.bench.sizes.settle_timeout_s
        while time.monotonic() < deadline:
            held = await db.holders(self.conn, self.settings.lock_namespace)
            if held == owners:
                return time.time() - since
            await asyncio.sleep(SETTLE_POLL_S)
        return None

    async def wait_drained(self, last_slot: float) -> float | None:
        """Seconds from ``last_slot`` until every job has completed its slots up to it;
        None if that did not happen within the drain timeout."""
        at = db_time(last_slot)
        deadline = time.monotonic() + self.bench.sizes.drain_timeout_s
        while time.monotonic() < deadline:
            if await db.unfinished(self.conn, at) == 0:
                logger.info(
                    "%s: drained %.2fs after the last slot", self.name, time.time() - last_slot
                )
                return time.time() - last_slot
            await asyncio.sleep(POLL_S)
        return None

    async def skipped_runs(self) -> int:
        cur = await self.conn.execute("SELECT count(*) AS n FROM runs WHERE status = 'skipped'")
        row = await cur.fetchone()
        return int(row["n"]) if row else 0

    def fires(self) -> list[Fire]:
        return [Fire.of(line) for line in read_witness(self.witness)]

    def measure(
        self,
        counts: Counts,
        drain_s: float | None,
        cpu: tuple[tuple[float, float], tuple[float, float]],
        extra: dict[str, Any],
    ) -> Measure:
        """The figures of a window: ``counts`` from the witness file, and ``cpu`` the
        sampler's (node, Postgres) CPU seconds at its start and end."""
        (node0, pg0), (node1, pg1) = cpu
        measure = Measure(
            system=self.system,
            expected=counts.expected,
            fires=counts.fires,
            missing=counts.missing,
            duplicates=counts.duplicates,
            lag_p50_ms=counts.lag_p50_ms,
            lag_p99_ms=counts.lag_p99_ms,
            lag_max_ms=counts.lag_max_ms,
            drain_s=drain_s,
            node_cpu_s=node1 - node0,
            pg_cpu_s=pg1 - pg0,
            peak_rss_mb=self.sampler.peak_rss_mb,
            extra=extra,
        )
        measure.per_1k()
        return measure


def db_time(epoch: float) -> datetime:
    return datetime.fromtimestamp(epoch, UTC)


async def sleep_until(epoch: float) -> None:
    delay = epoch - time.time()
    if delay > 0:
        await asyncio.sleep(delay)


def _scrape(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2) as response:
        body: bytes = response.read()
        return body.decode()


def _samples(text: str, prefix: str) -> list[tuple[str, float]]:
    found = []
    for line in text.splitlines():
        if line.startswith(prefix) and "{" not in line:
            name, _, value = line.partition(" ")
            found.append((name.removeprefix(prefix), float(value)))
    return found


def _buckets(text: str, name: str) -> dict[float, float]:
    """A Prometheus histogram's ``name{le="..."} count`` lines as {bound: count}."""
    found = {}
    for line in text.splitlines():
        if line.startswith(name + '{le="'):
            le, _, value = line.removeprefix(name + '{le="').partition('"} ')
            found[float(le)] = float(value)
    return found
