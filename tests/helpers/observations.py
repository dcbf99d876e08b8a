"""Hand-made observations of a chaos run, for the unit tests of its pure checks
(cluster/chaos/verdict): the fields every such test sets alike, a ten-second fault phase
from ``T0`` on two shards, with the jobs, rows and window each test gives."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from cluster.chaos.verdict.observations import (
    Execution,
    FaultRecord,
    JobInfo,
    LockSample,
    Observations,
    RunRecord,
)

T0 = 1_800_000_000.0


def observe(
    *,
    jobs: Sequence[JobInfo] = (),
    runs: Sequence[RunRecord] = (),
    executions: Sequence[Execution] = (),
    samples: Sequence[LockSample] = (),
    faults: Sequence[FaultRecord] = (),
    window_s: float = 9.0,
    **more: Any,
) -> Observations:
    """Observations of ``jobs`` over the window ``[T0, T0 + window_s]``; ``more``: the
    other fields of ``Observations`` (the keys' limits, say)."""
    return Observations(
        jobs={j.name: j for j in jobs},
        runs=list(runs),
        executions=list(executions),
        samples=list(samples),
        faults=list(faults),
        shards=2,
        window_start=T0,
        window_end=T0 + window_s,
        phase_start=T0,
        phase_end=T0 + 10,
        kill_bound_s=5.0,
        **more,
    )
