"""Failover and coverage measures of a chaos run (pure): L2 and L3 (the invariants in
``node/__init__.py``; the failover bound in docs/design/recovery.md).

* Gap after a fault: for each job the fault touched (jobs in shards its nodes held when it
  began; every job for a server fault), the time from when the job was next owed a start
  (the fault's start if its run in flight was lost, else its next slot, or the end of its
  run in flight if that is later) to when it was next handled (an execution, or a slot
  recorded as skipped). A fault's gap is the worst. A job pinned to zones the fault left
  without any live node (``dark``: every node of its zones a target, as in a zone-kill) is
  not owed anything while they are dark: its gap runs from the fault's end (the restart
  of its zones' nodes), and its missed slots are caught up by its policy then.
* Unheld shards: from the pg_locks samples, every stretch during which a shard had no
  holder, blamed on the fault it began under (a sample Postgres did not answer counts as
  unheld: its locks are gone). A stretch no fault explains is held to the kill bound.
"""

from __future__ import annotations

import bisect
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field

from cluster.chaos.verdict.observations import FaultRecord, LockSample, Observations
from cluster.jobs.models import RunStatus

ATTRIBUTION_SLACK_S = 1.0


@dataclass(frozen=True)
class Gap:
    fault: int
    affected: int
    gap_s: float
    job: str | None
    per_job: dict[str, float] = field(default_factory=dict)  # each affected job's gap


@dataclass(frozen=True)
class Unheld:
    shard: int
    start: float
    duration_s: float
    fault: int | None
    bound_s: float


def _holders_at(samples: Sequence[LockSample], moment: float) -> dict[int, str]:
    """The last answered sample at or before ``moment``."""
    times = [s.at for s in samples]
    for index in range(bisect.bisect_right(times, moment) - 1, -1, -1):
        holders = samples[index].holders
        if holders is not None:
            return dict(holders)
    return {}


def dark(obs: Observations, fault: FaultRecord, job: str) -> bool:
    """Every node of ``job``'s zones is a target of ``fault``: the job cannot run until
    the fault ends (an unpinned job never is)."""
    zones = obs.jobs[job].zones
    nodes = {node for node, zone in obs.node_zones.items() if zone in zones}
    return bool(nodes) and not fault.global_ and nodes <= set(fault.targets)


def affected_jobs(obs: Observations, fault: FaultRecord) -> list[str]:
    if fault.global_:
        return sorted(obs.jobs)
    holders = _holders_at(obs.samples, fault.started)
    shards = {shard for shard, node in holders.items() if node in fault.targets}
    return sorted(name for name, job in obs.jobs.items() if job.shard in shards)


@dataclass(frozen=True)
class _Handled:
    """An execution start (attempt >= 1) or a slot recorded skipped (attempt 0)."""

    at: float
    slot_ms: int
    attempt: int


def _histories(obs: Observations) -> tuple[dict[str, list[_Handled]], dict[tuple[str, int], int]]:
    """Per job, everything that handled one of its slots, by time; and each slot's last attempt."""
    history: dict[str, list[_Handled]] = defaultdict(list)
    final: dict[tuple[str, int], int] = defaultdict(int)
    for e in obs.executions:
        history[e.job].append(_Handled(e.at, e.slot_ms, e.attempt))
        final[(e.job, e.slot_ms)] = max(final[(e.job, e.slot_ms)], e.attempt)
    for r in obs.runs:
        if r.status == RunStatus.SKIPPED and r.finished_at is not None:
            history[r.job].append(_Handled(r.finished_at, r.slot_ms, 0))
    for events in history.values():
        events.sort(key=lambda h: h.at)
    return history, final


def fault_gaps(obs: Observations) -> list[Gap]:
    history, final = _histories(obs)
    end = max((h[-1].at for h in history.values() if h), default=obs.window_end)
    gaps = []
    for index, fault in enumerate(obs.faults):
        # What comes due once the next fault has begun is that fault's to answer for.
        until = obs.faults[index + 1].started if index + 1 < len(obs.faults) else end
        worst, worst_job = 0.0, None
        per_job = {}
        jobs = affected_jobs(obs, fault)
        for name in jobs:
            events = history[name]
            owed = _owed(obs, fault, name, events, final)
            if dark(obs, fault, name):
                owed = max(owed, fault.ended)
            if owed >= until:
                continue
            at = bisect.bisect_left([h.at for h in events], fault.started)
            fired = events[at].at if at < len(events) else end
            gap = max(0.0, fired - owed)
            per_job[name] = round(gap, 2)
            if gap > worst:
                worst, worst_job = gap, name
        gaps.append(Gap(index, len(jobs), worst, worst_job, per_job))
    return gaps


def _owed(
    obs: Observations,
    fault: FaultRecord,
    job: str,
    events: Sequence[_Handled],
    final: dict[tuple[str, int], int],
) -> float:
    """When the job was next owed a start (or a skip), as seen at the fault's start."""
    interval_s = obs.jobs[job].interval_s
    before = [h for h in events if h.at < fault.started]
    if not before:
        db_start = obs.phase_start + obs.clock_offset_s
        first = -(-db_start // interval_s) * interval_s  # its first slot of the fault phase
        return max(fault.started, first - obs.clock_offset_s)
    latest = max(before, key=lambda h: (h.slot_ms, h.attempt))
    if 0 < latest.attempt < final[(job, latest.slot_ms)]:
        return fault.started  # its run in flight was lost and had to run again
    next_slot = obs.slot_time(latest.slot_ms) + interval_s
    # A run still going blocks the next one (no overlap): a job catching up a backlog
    # is late already, and that lateness is not the fault's.
    busy_until = latest.at + obs.jobs[job].sleep_s if latest.attempt else latest.at
    return max(fault.started, next_slot, busy_until)


def _blame(obs: Observations, moment: float) -> int | None:
    best = None
    for index, fault in enumerate(obs.faults):
        if fault.started - ATTRIBUTION_SLACK_S <= moment <= fault.ended + fault.bound_s:
            best = index
    return best


def unheld_stretches(obs: Observations) -> list[Unheld]:
    samples = [s for s in obs.samples if s.at >= obs.phase_start]
    open_since: dict[int, float] = {}
    found: list[Unheld] = []

    def close(shard: int, until: float) -> None:
        start = open_since.pop(shard)
        fault = _blame(obs, start)
        bound = obs.faults[fault].bound_s if fault is not None else obs.kill_bound_s
        found.append(Unheld(shard, start, until - start, fault, bound))

    for sample in samples:
        holders = sample.holders or {}
        for shard in range(obs.shards):
            if shard in holders:
                if shard in open_since:
                    close(shard, sample.at)
            elif shard not in open_since:
                open_since[shard] = sample.at
    if samples:
        for shard in sorted(open_since):
            close(shard, samples[-1].at)
    return found
