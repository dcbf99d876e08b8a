"""Safety and loss checks of a chaos run (pure): S1, S2, S4 and L1 (the invariants in
``node/__init__.py``; fencing in docs/design/lock-session.md).

From the witness lines and the final runs rows it finds executions the runs table cannot
explain (double executions of one claim, executions without a claim, completions without
an execution, early fires), the slots executed more than once (legitimate only as re-runs
after a lost lease: each is attributed to the fault that caused it, and one no fault
explains is a violation; a lost attempt witnessed only after a later one is flagged: a
node frozen while starting a run, or a zombie acting on a stale claim), and the expected
slots that were neither run nor recorded as skipped. The poison job is held to its own
rule instead: each of its slots ran at most retries + 1 times (each time killing its node)
and was recorded failed, written by the node that took the slot back.

With asynchronous replication (``--pg-async``) a Postgres failover may lose the last
commits of the old primary. A lost completion leaves its run ``running`` on the new one:
it runs again, as the next attempt, once its lease expires, a re-run attributed like any
other. A lost claim leaves the slot due: it is claimed again under the same attempt, so
that attempt runs twice; that is attributed to the failover (a re-run with cause
``claim lost``) when the first execution began at most ``ATTRIBUTION_LEAD_S`` before the
kill (or within the slack after it) and the second after it. Anything else stays a
double execution. With synchronous replication nothing is attributed this way.
"""

from __future__ import annotations

import itertools
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass

from cluster.chaos.verdict.observations import Execution, JobInfo, Observations, RunRecord
from cluster.jobs.models import FINISHED, RunStatus

# Besides a finished run: a slot skipped at its claim, or one that started and was stopped
# (overlap replace, a cancel request) is accounted for too.
_ACCOUNTED = frozenset({RunStatus.SKIPPED, RunStatus.CANCELLED})
EARLY_TOLERANCE_S = 0.05
ATTRIBUTION_LEAD_S = 5.0  # a run lost to a fault may have started this long before it
CLAIM_SLACK_S = 1.0  # a claim committed just before a kill may start its run just after
LEASE_LOST = "lease lost"
CLAIM_LOST = "claim lost"  # with the old primary's unreplicated commits


@dataclass(frozen=True)
class Violation:
    kind: str
    job: str
    slot_ms: int | None
    detail: str


@dataclass(frozen=True)
class Rerun:
    """A slot executed more than once, and the fault its lost attempt is blamed on."""

    job: str
    slot_ms: int
    attempts: tuple[int, ...]
    nodes: tuple[str, ...]
    lost_at: float
    fault: int | None  # index into Observations.faults
    late: bool = False  # a lost attempt was witnessed only after a later attempt was
    cause: str = LEASE_LOST


def _v(kind: str, job: str, slot_ms: int | None, detail: str) -> Violation:
    return Violation(kind, job, slot_ms, detail)


def check_executions(obs: Observations) -> list[Violation]:
    """Witness lines against the runs table: one execution per claim, none unexplained."""
    found: list[Violation] = []
    runs = {(r.job, r.slot_ms): r for r in obs.runs}
    seen: dict[tuple[str, int, int], Execution] = {}
    for e in obs.executions:
        key = (e.job, e.slot_ms, e.attempt)
        if key in seen and lost_claim(obs, seen[key], e) is None:
            first = seen[key]
            found.append(
                _v(
                    "double execution",
                    e.job,
                    e.slot_ms,
                    f"attempt {e.attempt} ran on {first.node} and again on {e.node}",
                )
            )
        seen[key] = e
        run = runs.get((e.job, e.slot_ms))
        if run is None:
            found.append(_v("execution without a claim", e.job, e.slot_ms, f"on {e.node}"))
        elif e.attempt > run.attempt:
            found.append(
                _v(
                    "unknown attempt",
                    e.job,
                    e.slot_ms,
                    f"attempt {e.attempt} ran on {e.node}; runs row is at {run.attempt}",
                )
            )
        if e.at < obs.slot_time(e.slot_ms) - EARLY_TOLERANCE_S:
            early = obs.slot_time(e.slot_ms) - e.at
            found.append(_v("early fire", e.job, e.slot_ms, f"{early:.3f}s early on {e.node}"))
    for run in obs.runs:
        if run.status not in FINISHED or run.job == obs.poison_job:
            continue  # a poison slot is recorded by the node that took it back
        witness = seen.get((run.job, run.slot_ms, run.attempt))
        if witness is None:
            found.append(
                _v(
                    "completion without execution",
                    run.job,
                    run.slot_ms,
                    f"{run.status} at attempt {run.attempt} on {run.node}; no witness line",
                )
            )
        elif run.node is not None and witness.node != run.node:
            found.append(
                _v(
                    "claim mismatch",
                    run.job,
                    run.slot_ms,
                    f"attempt {run.attempt} ran on {witness.node}, runs row says {run.node}",
                )
            )
    return found


def lost_claim(obs: Observations, first: Execution, again: Execution) -> int | None:
    """The Postgres failover whose unreplicated commits lost ``first``'s claim, so that
    ``again`` ran the same attempt (asynchronous replication only)."""
    if not obs.async_replication:
        return None
    for index, fault in enumerate(obs.faults):
        if fault.kind != "pg-failover":
            continue
        began_before = fault.started - ATTRIBUTION_LEAD_S <= first.at
        if began_before and first.at <= fault.started + CLAIM_SLACK_S <= again.at + CLAIM_SLACK_S:
            return index
    return None


def _blame(obs: Observations, lost: Execution, rerun_at: float) -> int | None:
    """The latest fault that touched ``lost``'s node around it and began before the re-run."""
    best: int | None = None
    for index, fault in enumerate(obs.faults):
        touches = fault.global_ or lost.node in fault.targets
        info = obs.jobs.get(lost.job)
        lead = ATTRIBUTION_LEAD_S + (info.sleep_s if info else 0.0)
        near = fault.started - lead <= lost.at <= fault.ended + fault.bound_s
        if touches and near and fault.started <= rerun_at:
            best = index
    return best


def find_reruns(obs: Observations) -> list[Rerun]:
    by_slot: dict[tuple[str, int], list[Execution]] = defaultdict(list)
    for e in obs.executions:
        if e.job != obs.poison_job:  # its attempts are the fault itself
            by_slot[(e.job, e.slot_ms)].append(e)
    found = []
    for (job, slot_ms), runs in sorted(by_slot.items()):
        attempts = sorted({e.attempt for e in runs})
        runs.sort(key=lambda e: (e.attempt, e.at))
        for first, again in itertools.pairwise(runs):
            fault = lost_claim(obs, first, again) if first.attempt == again.attempt else None
            if fault is not None:
                found.append(
                    Rerun(
                        job=job,
                        slot_ms=slot_ms,
                        attempts=(first.attempt, again.attempt),
                        nodes=(first.node, again.node),
                        lost_at=first.at,
                        fault=fault,
                        cause=CLAIM_LOST,
                    )
                )
        if len(attempts) < 2:
            continue
        lost, again = runs[0], runs[-1]
        found.append(
            Rerun(
                job=job,
                slot_ms=slot_ms,
                attempts=tuple(attempts),
                nodes=tuple(e.node for e in runs),
                lost_at=lost.at,
                fault=_blame(obs, lost, again.at),
                late=any(a.at > b.at for a, b in itertools.pairwise(runs)),
            )
        )
    return found


def expected_slots(job: JobInfo, start: float, end: float) -> list[int]:
    """The ``@every`` slots of ``job`` in [start, end], in ms (multiples since the epoch)."""
    every_ms = job.interval_s * 1000
    first = -(-round(start * 1000) // every_ms)
    last = round(end * 1000) // every_ms
    return [i * every_ms for i in range(first, last + 1)]


def find_lost(obs: Observations) -> tuple[int, list[Violation]]:
    """(expected slot count, the expected slots neither finished nor recorded skipped)."""
    runs: dict[tuple[str, int], RunRecord] = {(r.job, r.slot_ms): r for r in obs.runs}
    expected = 0
    lost: list[Violation] = []
    start, end = (obs.window_start + obs.clock_offset_s, obs.window_end + obs.clock_offset_s)
    succeeded = {(r.job, r.slot_ms) for r in obs.runs if r.status == RunStatus.SUCCEEDED}
    for job in obs.jobs.values():
        slots = expected_slots(job, start, end)
        if job.chained:  # its slots are the slots its upstreams succeeded
            slots = [s for s in slots if all((u, s) in succeeded for u in job.after)]
        for slot_ms in slots:
            expected += 1
            run = runs.get((job.name, slot_ms))
            if run is not None and (run.status in FINISHED or run.status in _ACCOUNTED):
                continue
            why = "no run row" if run is None else f"left {run.status} (attempt {run.attempt})"
            lost.append(_v("lost slot", job.name, slot_ms, why))
    return expected, lost


def unattributed(reruns: Sequence[Rerun]) -> list[Violation]:
    return [
        _v(
            "re-run without a fault",
            r.job,
            r.slot_ms,
            f"attempts {list(r.attempts)} on {', '.join(r.nodes)}",
        )
        for r in reruns
        if r.fault is None
    ]


@dataclass(frozen=True)
class PoisonSummary:
    slots: int  # slots of the poison job that ran
    executions: int  # each one killed the node that ran it
    most_per_slot: int
    allowed_per_slot: int  # retries + 1


def check_poison(obs: Observations) -> tuple[PoisonSummary | None, list[Violation]]:
    """Each poison slot ran at most retries + 1 times and ended recorded ``failed``."""
    if obs.poison_job is None:
        return None, []
    runs = {r.slot_ms: r for r in obs.runs if r.job == obs.poison_job}
    per_slot: dict[int, int] = defaultdict(int)
    for e in obs.executions:
        if e.job == obs.poison_job:
            per_slot[e.slot_ms] += 1
    allowed = obs.poison_retries + 1
    found = []
    for slot_ms, count in sorted(per_slot.items()):
        if count > allowed:
            detail = f"ran {count} times (each a node killed); at most {allowed} allowed"
            found.append(_v("poison job ran too often", obs.poison_job, slot_ms, detail))
        run = runs.get(slot_ms)
        if run is None or run.status != RunStatus.FAILED:
            why = "no run row" if run is None else f"{run.status} at attempt {run.attempt}"
            found.append(_v("poison slot not recorded failed", obs.poison_job, slot_ms, why))
    summary = PoisonSummary(
        len(per_slot), sum(per_slot.values()), max(per_slot.values(), default=0), allowed
    )
    return summary, found
