"""What the witness file says ran: fires, missing and doubled slots, lag, gaps.

Each witness line is one handler start (``cluster.chaos.witness``, which reads them too):
job name, the slot it ran (``scheduled_for``), the attempt, the node and the wall time the
handler started.
Nodes and the benchmark run on one machine, so that wall time and the database's slot
times share a clock.
"""

from __future__ import annotations

import bisect
import itertools
import math
from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from cluster.chaos.witness import Execution


@dataclass(frozen=True)
class Fire:
    job: str
    slot: float  # epoch seconds
    attempt: int
    node: str
    at: float  # epoch seconds, handler start

    @classmethod
    def of(cls, line: Execution) -> Fire:
        return cls(line.job, line.slot.timestamp(), line.attempt, line.node, line.at)


@dataclass(frozen=True)
class Counts:
    expected: int
    fires: int
    missing: int
    duplicates: int
    lag_p50_ms: float | None
    lag_p99_ms: float | None
    lag_max_ms: float | None


def percentile(values: Sequence[float], q: float) -> float | None:
    """The ``q``-th percentile (0-100), nearest rank; None for no values."""
    if not values:
        return None
    ordered = sorted(values)
    rank = max(1, math.ceil(q / 100 * len(ordered)))
    return ordered[rank - 1]


def histogram(values: Iterable[float], bounds: Sequence[float]) -> dict[float, float]:
    """``values`` as a cumulative histogram over ``bounds`` (and +Inf), as a node keeps one."""
    ordered = sorted(values)
    found = {b: float(bisect.bisect_right(ordered, b)) for b in bounds}
    found[math.inf] = float(len(ordered))
    return found


def merge(histograms: Iterable[dict[float, float]]) -> dict[float, float]:
    total: Counter[float] = Counter()
    for h in histograms:
        total.update(h)
    return dict(total)


def since(later: dict[float, float], earlier: dict[float, float]) -> dict[float, float]:
    """The observations a cumulative histogram gained between two readings."""
    return {b: n - earlier.get(b, 0.0) for b, n in later.items()}


def bucket_quantile(h: dict[float, float], q: float) -> float | None:
    """The ``q``-th percentile (0-100) of a cumulative histogram, interpolated linearly
    inside its bucket (as Prometheus's histogram_quantile does); None if it is empty, the
    highest finite bound if it falls in the +Inf bucket."""
    bounds = sorted(h)
    total = h.get(math.inf, 0.0)
    if total <= 0:
        return None
    rank = q / 100 * total
    lower, below = 0.0, 0.0
    for bound in bounds:
        if h[bound] >= rank:
            if math.isinf(bound):
                return lower
            inside = h[bound] - below
            return lower + (bound - lower) * ((rank - below) / inside if inside else 1.0)
        lower, below = bound, h[bound]
    return lower


def expected_slots(jobs: Iterable[str], slots: Iterable[float]) -> set[tuple[str, float]]:
    slot_list = [round(s, 6) for s in slots]
    return {(job, slot) for job in jobs for slot in slot_list}


def count(fires: Sequence[Fire], expected: set[tuple[str, float]]) -> Counts:
    """Fires of expected slots only: slots outside the window are not counted."""
    seen: Counter[tuple[str, float]] = Counter()
    lags = []
    for fire in fires:
        key = (fire.job, round(fire.slot, 6))
        if key not in expected:
            continue
        seen[key] += 1
        lags.append((fire.at - fire.slot) * 1000)

    def ms(q: float) -> float | None:
        return percentile(lags, q)

    return Counts(
        expected=len(expected),
        fires=sum(seen.values()),
        missing=len(expected) - len(seen),
        duplicates=sum(n - 1 for n in seen.values()),
        lag_p50_ms=ms(50),
        lag_p99_ms=ms(99),
        lag_max_ms=max(lags) if lags else None,
    )


def longest_gap(fires: Sequence[Fire], after: float, until: float) -> float | None:
    """The longest time between two consecutive starts of one job, for gaps that end
    after ``after`` (so the gap across a kill counts); a job with no start after
    ``after`` contributes the gap up to ``until``."""
    starts: dict[str, list[float]] = defaultdict(list)
    for fire in fires:
        starts[fire.job].append(fire.at)
    longest = 0.0
    for times in starts.values():
        times.sort()
        for prev, nxt in itertools.pairwise(times):
            if nxt > after:
                longest = max(longest, nxt - prev)
        if times and times[-1] < after:
            longest = max(longest, until - times[-1])
    return longest if starts else None


def reruns_of(fires: Sequence[Fire], node: str, before: float) -> int:
    """Second and later starts of slots whose first start was on ``node`` before
    ``before``: the runs a killed node had begun, run again after recovery (at least
    once), as opposed to a slot claimed twice."""
    by_slot: dict[tuple[str, float], list[Fire]] = defaultdict(list)
    for fire in fires:
        by_slot[(fire.job, round(fire.slot, 6))].append(fire)
    found = 0
    for starts in by_slot.values():
        first = min(starts, key=lambda f: f.at)
        if len(starts) > 1 and first.node == node and first.at <= before:
            found += len(starts) - 1
    return found
