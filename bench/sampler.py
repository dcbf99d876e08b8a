"""CPU and memory of benchmark processes, read from ``/proc``.

Node CPU is the ``utime + stime`` of each node process (its threads included); Postgres CPU
is the same for the backends serving the benchmark database (the server's shared
background processes are left out, since other databases on a shared server use them
too). Readings are cumulative per pid; the last value seen of a pid that exited is kept,
so the CPU of a window is the difference of two totals.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import Awaitable, Callable, Iterable

CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
SAMPLE_INTERVAL_S = 0.5


def cpu_seconds(pid: int) -> float | None:
    """User + system CPU seconds of ``pid`` so far, or None if it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            text = f.read()
    except OSError:
        return None
    # The command name may hold spaces or parentheses: fields follow the last ')'.
    fields = text[text.rindex(b")") + 2 :].split()
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS


def peak_rss_mb(pid: int) -> float | None:
    """Peak resident set size (VmHWM) of ``pid`` in MiB, or None if it is gone."""
    try:
        with open(f"/proc/{pid}/status", "rb") as f:
            for line in f:
                if line.startswith(b"VmHWM:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        return None
    return None


class CpuTotal:
    """Cumulative CPU seconds of a changing set of pids."""

    def __init__(self) -> None:
        self.last: dict[int, float] = {}

    def update(self, pids: Iterable[int]) -> None:
        for pid in pids:
            value = cpu_seconds(pid)
            if value is not None:
                self.last[pid] = value

    @property
    def total(self) -> float:
        return sum(self.last.values())


class Sampler:
    """Samples node pids and Postgres backend pids until stopped.

    ``node_pids`` and ``pg_pids`` are called at every sample, so processes started or
    connections opened during a scenario are picked up.
    """

    def __init__(
        self,
        node_pids: Callable[[], Iterable[int]],
        pg_pids: Callable[[], Awaitable[list[int]]],
    ) -> None:
        self._node_pids = node_pids
        self._pg_pids = pg_pids
        self.nodes = CpuTotal()
        self.postgres = CpuTotal()
        self.peak_rss_mb = 0.0
        self._task: asyncio.Task[None] | None = None

    async def sample(self) -> None:
        nodes = list(self._node_pids())
        self.nodes.update(nodes)
        for pid in nodes:
            rss = peak_rss_mb(pid)
            if rss is not None:
                self.peak_rss_mb = max(self.peak_rss_mb, rss)
        self.postgres.update(await self._pg_pids())

    async def _loop(self) -> None:
        while True:
            with contextlib.suppress(Exception):
                await self.sample()
            await asyncio.sleep(SAMPLE_INTERVAL_S)

    def start(self) -> None:
        self._task = asyncio.create_task(self._loop())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        await self.sample()

    async def mark(self) -> tuple[float, float]:
        """Sample now and return (node CPU s, Postgres CPU s) so far."""
        await self.sample()
        return self.nodes.total, self.postgres.total
