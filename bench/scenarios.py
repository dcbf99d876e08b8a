"""The timed scenarios: steady, burst, failover and rebalance (scale lives in ``scale.py``).

Each runs once per system with the same jobs and sizes. Jobs are loaded far in the future,
the processes are started and waited for (every shard held by its ring owner, for Pulse),
then every job is moved to the first slot a few seconds ahead: the measured window starts
with a warm cluster, as in production, and startup is reported separately (``ready_s``).
Periodic scenarios run one tick before their window for the same reason.
"""

from __future__ import annotations

import asyncio
import math
import signal
import time
from collections.abc import Callable, Coroutine, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from bench import database as db
from bench.analysis import (
    bucket_quantile,
    count,
    expected_slots,
    longest_gap,
    merge,
    reruns_of,
    since,
)
from bench.results import Measure, ScenarioResult
from bench.sizes import Sizes
from bench.trial import Bench, BenchError, Trial, db_time, sleep_until

FAR_AHEAD = timedelta(days=1)
# Failover kills just after a tick fired, so the victim dies with runs in flight.
KILL_AFTER_TICK_S = 0.02
MAX_EVERY_S = 3650 * 86400  # cluster/timing/schedule.py's cap on @every


def burst_slot(earliest: int) -> tuple[int, int]:
    """A second ``t0 >= earliest`` and an interval with ``t0`` a slot of ``@every
    <interval>s`` and the next slot years away. Pulse skips a claimed "slot" that is not a
    slot of its schedule, so the burst needs a real one: ``t0 = k * interval`` for a small
    ``k`` (slots are multiples of the interval since the epoch)."""
    t0 = earliest
    while True:
        for k in range(2, 41):
            if t0 % k == 0 and t0 // k <= MAX_EVERY_S:
                return t0, t0 // k
        t0 += 1


Event = Callable[[Trial, float, list[str]], Coroutine[Any, Any, dict[str, Any]]]
# Runs after the jobs are loaded, before the processes start (pre-filling tables, say).
Prepare = Callable[[Trial], Coroutine[Any, Any, None]]


@dataclass(frozen=True)
class Scraped:
    """What the Pulse nodes' metrics said at one end of a window (empty for the baseline)."""

    claims: dict[str, tuple[float, float]]
    buckets: dict[str, dict[float, float]]
    pruned: dict[str, float]

    @classmethod
    async def read(cls, trial: Trial) -> Scraped:
        return cls(
            await trial.claim_counters(),
            await trial.claim_buckets(),
            await trial.counter("pulse_runs_pruned_total"),
        )


def _window_claims(start: Scraped, end: Scraped) -> dict[str, Any]:
    """Claim latency quantiles over the window (from the nodes' histogram buckets, of the
    nodes alive at both ends) and the runs pruned meanwhile."""
    h = merge(since(b, start.buckets[n]) for n, b in end.buckets.items() if n in start.buckets)
    if not h.get(math.inf):
        return {}
    p50, p99 = bucket_quantile(h, 50), bucket_quantile(h, 99)
    return {
        "window_claim_p50_ms": None if p50 is None else p50 * 1000,
        "window_claim_p99_ms": None if p99 is None else p99 * 1000,
        "runs_pruned": sum(v - start.pruned.get(n, 0.0) for n, v in end.pruned.items()),
    }


async def measure_window(
    trial: Trial,
    names: list[str],
    slots: list[float],
    cpu0: tuple[float, float],
    scraped0: Scraped,
    drain_s: float | None,
    ready_s: float,
) -> Measure:
    cpu1 = await trial.sampler.mark()
    scraped1 = await Scraped.read(trial)
    claims0, claims1 = scraped0.claims, scraped1.claims
    trial.profile_stop()
    await trial.stop()
    fires = trial.fires()
    counts = count(fires, expected_slots(names, slots))
    measure = trial.measure(counts, drain_s, (cpu0, cpu1), {"ready_s": round(ready_s, 3)})
    # Claims of the nodes alive at both ends of the window (a killed node's are lost).
    claims = [
        (c1[0] - claims0[n][0], c1[1] - claims0[n][1]) for n, c1 in claims1.items() if n in claims0
    ]
    if claims and counts.fires:
        n_claims = sum(c for c, _ in claims)
        measure.extra["claims_per_1k_fires"] = n_claims / counts.fires * 1000
        measure.extra["claim_mean_ms"] = sum(t for _, t in claims) / max(n_claims, 1) * 1000
    if trial.system == "pulse":
        measure.extra["skipped_runs"] = await trial.skipped_runs()
        measure.extra.update(_window_claims(scraped0, scraped1))
    return measure


async def periodic(
    bench: Bench,
    scenario: str,
    system: str,
    event: Event | None = None,
    *,
    prepare: Prepare | None = None,
    node_options: Sequence[str] = (),
) -> Measure:
    """``steady_jobs`` jobs ``@every steady_every_s`` for ``steady_duration_s``, with an
    optional event (a kill, a join) running alongside."""
    sizes = bench.sizes
    every = sizes.steady_every_s
    async with Trial(bench, scenario, system, node_options=node_options) as trial:
        now = await db.db_now(trial.conn)
        names = await db.load_jobs(
            trial.conn, sizes.steady_jobs, f"@every {every}s", sizes.shards, now + FAR_AHEAD
        )
        if prepare is not None:
            await prepare(trial)
        procs = trial.start_all()
        ready_s = await trial.wait_ready(procs)
        now_s = (await db.db_now(trial.conn)).timestamp()
        # One tick before the window: what a process does once (imports, handler threads,
        # parsed schedules) is not a cost per fire. The window runs from that tick drained
        # to the last one drained: whole periods, each with one tick and its idle time.
        warmup = math.ceil((now_s + sizes.lead_s) / every) * every
        t0 = warmup + every
        ticks = max(1, int(sizes.steady_duration_s // every))
        slots: list[float] = [t0 + k * every for k in range(ticks)]
        await db.make_due(trial.conn, db_time(warmup))
        await sleep_until(warmup)
        if await trial.wait_drained(warmup) is None:
            raise BenchError(f"the warm-up tick did not drain within {sizes.drain_timeout_s}s")
        # Metrics are read outside the CPU window (here and at its end): serving a scrape
        # costs a node CPU that the baseline, never scraped, does not pay.
        scraped0 = await Scraped.read(trial)
        cpu0 = await trial.sampler.mark()
        trial.profile_start()
        task = asyncio.create_task(event(trial, t0, procs)) if event else None
        await sleep_until(slots[-1])
        drain_s = await trial.wait_drained(slots[-1])
        extra = await task if task else {}
        stopped_at = time.time()
        measure = await measure_window(trial, names, slots, cpu0, scraped0, drain_s, ready_s)
        if "killed_at" in extra:
            killed_at = extra.pop("killed_at")
            extra["longest_gap_s"] = longest_gap(trial.fires(), killed_at, stopped_at)
            extra["reruns_of_killed"] = reruns_of(trial.fires(), extra["killed"], killed_at)
        measure.extra.update(extra)
        return measure


async def burst(bench: Bench, system: str) -> Measure:
    """``burst_jobs`` jobs all due at the same second (a top-of-hour fan-out)."""
    sizes = bench.sizes
    async with Trial(bench, "burst", system) as trial:
        now = await db.db_now(trial.conn)
        names = await db.load_jobs(
            trial.conn, sizes.burst_jobs, "@every 1h", sizes.shards, now + FAR_AHEAD
        )
        measure, _ = await fire_burst(trial, names)
        return measure


async def fire_burst(
    trial: Trial, names: list[str], *, one_off: bool = False
) -> tuple[Measure, float]:
    """Start the trial's nodes, make the loaded jobs due at one second once they are ready
    (``one_off``: as ``@at`` jobs of that second), and measure until they have drained;
    (the measure, that second)."""
    procs = trial.start_all()
    ready_s = await trial.wait_ready(procs)
    now_s = (await db.db_now(trial.conn)).timestamp()
    t0, every = burst_slot(math.ceil(now_s + trial.bench.sizes.lead_s))
    schedule = f"@at {db_time(t0).isoformat()}" if one_off else f"@every {every}s"
    # The jobs are due from t0, or from the moment the update made them so when it took
    # longer than the lead (a new schedule is a revision of each job): the drain counts
    # from then, for both systems; lags still count from t0.
    due_late_s = max(0.0, (await db.make_due(trial.conn, db_time(t0), schedule)).timestamp() - t0)
    scraped0 = await Scraped.read(trial)
    cpu0 = await trial.sampler.mark()
    trial.profile_start()
    drain_s = await trial.wait_drained(t0)
    if drain_s is not None:
        drain_s -= due_late_s
    measure = await measure_window(trial, names, [t0], cpu0, scraped0, drain_s, ready_s)
    if due_late_s:
        measure.extra["due_late_s"] = round(due_late_s, 3)
    return measure, t0


def _failover(sizes: Sizes) -> Event:
    async def kill_one(trial: Trial, t0: float, names: list[str]) -> dict[str, Any]:
        await sleep_until(t0 + sizes.kill_at_s + KILL_AFTER_TICK_S)
        victim = names[1]
        killed_at = trial.kill(victim, signal.SIGKILL)
        rest = [n for n in names if n != victim]
        settle_s = await trial.wait_settled(rest, killed_at)
        return {"killed": victim, "killed_at": killed_at, "settle_s": settle_s}

    return kill_one


def _rebalance(sizes: Sizes) -> Event:
    async def join_then_leave(trial: Trial, t0: float, names: list[str]) -> dict[str, Any]:
        await sleep_until(t0 + sizes.join_at_s)
        joined_at = time.time()
        newcomer = trial.start(len(names) + 1)
        members = [*names, newcomer]
        join_s = await trial.wait_settled(members, joined_at)
        await sleep_until(t0 + sizes.leave_at_s)
        leaver = names[0]
        left_at = trial.kill(leaver, signal.SIGTERM)
        leave_s = await trial.wait_settled([m for m in members if m != leaver], left_at)
        return {
            "joined": newcomer,
            "join_settle_s": join_s,
            "left": leaver,
            "leave_settle_s": leave_s,
        }

    return join_then_leave


# -- scenarios ----------------------------------------------------------------------------


class Baselines:
    """The steady baseline is the reference for steady, failover and rebalance alike (the
    bare loop has no membership to fail over or rebalance): measured once per run."""

    def __init__(self, bench: Bench) -> None:
        self._bench = bench
        self._steady: Measure | None = None

    async def steady(self) -> Measure:
        if self._steady is None:
            self._steady = await periodic(self._bench, "steady", "baseline")
        return self._steady


def _periodic_params(sizes: Sizes, *extra: str) -> dict[str, Any]:
    return sizes.params("steady_jobs", "steady_every_s", "steady_duration_s", *extra)


async def run_steady(bench: Bench, baselines: Baselines) -> ScenarioResult:
    base = await baselines.steady()
    pulse = await periodic(bench, "steady", "pulse")
    return ScenarioResult("steady", _periodic_params(bench.sizes), pulse, base)


async def run_burst(bench: Bench, baselines: Baselines) -> ScenarioResult:
    base = await burst(bench, "baseline")
    pulse = await burst(bench, "pulse")
    return ScenarioResult("burst", bench.sizes.params("burst_jobs"), pulse, base)


async def run_failover(bench: Bench, baselines: Baselines) -> ScenarioResult:
    base = await baselines.steady()
    pulse = await periodic(bench, "failover", "pulse", _failover(bench.sizes))
    params = _periodic_params(bench.sizes, "kill_at_s")
    return ScenarioResult("failover", params, pulse, base, "steady baseline (no kill)")


async def run_rebalance(bench: Bench, baselines: Baselines) -> ScenarioResult:
    base = await baselines.steady()
    pulse = await periodic(bench, "rebalance", "pulse", _rebalance(bench.sizes))
    params = _periodic_params(bench.sizes, "join_at_s", "leave_at_s")
    return ScenarioResult("rebalance", params, pulse, base, "steady baseline (no join/leave)")


__all__ = ["Baselines", "BenchError", "run_burst", "run_failover", "run_rebalance", "run_steady"]
