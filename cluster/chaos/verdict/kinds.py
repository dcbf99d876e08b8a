"""Named checks of job kinds beyond the common ones (pure): each looks at the jobs of its
kind only, and reports what it saw and what it found wrong.

``CHECKS`` lists them in report order; a check returns ``None`` when the run had no job of
its kind, so it is left out of the report. A check of a new job kind is a function of
``Observations`` added to ``CHECKS`` (its jobs made by ``workload``, its inputs collected
by ``harness`` into ``Observations``).

- ``exactly-once effects`` (kind ``effects``, ``cluster.chaos.ledger``): the ledger holds
  exactly one row for every slot whose run succeeded, written by the run whose completion
  applied (the row's fencing token is the run row's lease token), and no row for any other
  slot. Execution is at least once: a run lost to a fault ran again, and a zombie's run
  may have inserted its row too, but only a transaction committed with the fenced
  completion may remain.
- ``allow slots`` (kind ``allow``: overlap ``allow``, docs/design/overlap.md): no attempt of
  a slot executed twice (re-runs are later attempts, after a lost lease, which the common
  checks attribute; with ``--pg-async``, an attempt whose claim a failover lost may run
  again, ``safety.lost_claim``, and the first execution then ends where the second
  began); at most one succeeded runs row per slot; never more than ``max_concurrent``
  executions of a job at once; and no slot started later than
  ``allow_lateness_s`` after it fell due. The witness records starts only, so each
  execution is taken to last ``[start, start + hold]`` (its handler sleeps the hold, and
  its flight is freed only after the handler returns): an interval inside the true one,
  so the count at any moment is at most the true count, and a count above the limit is
  a real breach, never an artefact. A lost attempt's interval ends where the slot's next
  attempt starts (its node died or was cut off: the flight was taken back). Missing slots
  are the common loss check's (L1), which covers these jobs like any other; their
  lateness is bounded here instead, as lag is not loss.
- ``replace slots`` (kind ``replace``: overlap ``replace``, docs/jobs.md): a run whose
  next slot started while its handler still held (the sync witness handler ignores
  ``ctx.cancelled``) was replaced, so it must not be recorded ``succeeded``: it is
  ``cancelled``; and no slot started later than ``replace_lateness_s`` after it fell due,
  so a slot never waits for the run it replaces. Slots whose run took more than one attempt
  (a fault took one) are left to the common checks.
- ``zone placement`` (kind ``pinned``): every execution of a pinned job ran on a node of
  one of its zones (node -> zone from the fleet). A pinned job whose zones were all dark
  during a fault owes nothing while they are (``failover.dark``); it backfills, so the
  loss check still proves every one of its slots ran once the zone returned.
- ``blips move no shard`` (faults ``pg-blip``, ``cluster.chaos.verdict.blips``): no shard of a
  node whose Postgres connections were cut for less than the grace went to another node.
- ``dependencies`` (jobs with upstreams, kind ``dependent``): no slot of a downstream ran
  its first attempt twice; every execution ran a slot whose upstreams' same slots
  succeeded, and started after their completions were written; and every slot in the
  window whose upstreams all succeeded has a run row (none lost). Slots skipped because
  an upstream failed are the common loss check's, which counts them accounted for.
- ``key limits`` (jobs with ``uses``, kind ``keyed``, docs/limits.md): no named limit was
  ever held by more runs than its limit, counted from the runs' start and end times in the
  database. A run row keeps its slot's last attempt from its start (when it took its keys,
  moved past the end of any run whose key it took) to its end (written in the transaction
  that gave them back): inside the time it held them, so a count above the limit is a real
  breach. An attempt a later one replaced is not counted: an excess may be missed, never
  invented.
- ``catch-up skips`` (every job, ``cluster.chaos.verdict.skips``): a slot recorded skipped
  as missed names the job's policy, was missed by more than its grace under ``skip``, was
  recorded no sooner than it says it was missed, and under ``once`` was coalesced into a
  later slot that has a record.
"""

from __future__ import annotations

import itertools
from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field

from cluster.chaos.verdict.blips import blips_move_no_shard
from cluster.chaos.verdict.failover import dark
from cluster.chaos.verdict.observations import Execution, Observations
from cluster.chaos.verdict.safety import Violation, find_lost, lost_claim
from cluster.chaos.verdict.skips import catch_up_skips
from cluster.jobs.models import RunStatus

# How late an allow slot may start beyond the worst fault bound of the run: a slot owed
# during a fault is claimed within that bound, then waits for a place while the flights
# ahead of it (at most max_concurrent, each holding the job's hold) finish; a flight
# queued after a lost attempt is looked for every 2 s, and a claim comes within a second.
ALLOW_SLACK_S = 3.0
# How late a replace slot may start beyond the worst fault bound of the run: the replaced
# run's completion is written, then the next poll of a claim loop takes the slot.
REPLACE_SLACK_S = 2.0
# The witness stamps a start with the node's clock, a completion's time is the database's
# minus the measured offset: a start this much before it is within that measurement.
DEPENDENCY_CLOCK_SLACK_S = 0.05


@dataclass(frozen=True)
class CheckResult:
    name: str
    summary: str  # what was checked, in a few words
    violations: list[Violation] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.violations


def exactly_once_effects(obs: Observations) -> CheckResult | None:
    jobs = {name for name, job in obs.jobs.items() if job.kind == "effects"}
    if not jobs:
        return None
    runs = {(r.job, r.slot_ms): r for r in obs.runs if r.job in jobs}
    succeeded = {key: r for key, r in runs.items() if r.status == RunStatus.SUCCEEDED}
    rows = [row for row in obs.ledger if row.job in jobs]
    per_slot = Counter((row.job, row.slot_ms) for row in rows)
    found = [
        Violation("effect committed twice", job, slot_ms, f"{count} rows")
        for (job, slot_ms), count in sorted(per_slot.items())
        if count > 1
    ]
    for row in rows:
        key = (row.job, row.slot_ms)
        run, where = runs.get(key), f"attempt {row.attempt} on {row.node}, token {row.token}"
        if run is None or run.status != RunStatus.SUCCEEDED:
            status = "no run row" if run is None else f"run {run.status}"
            kind = "effect of a slot that did not succeed"
            found.append(Violation(kind, row.job, row.slot_ms, f"{where}; {status}"))
        elif row.token != run.token:
            detail = f"{where}; the completion carried token {run.token}"
            found.append(Violation("effect of a fenced run", row.job, row.slot_ms, detail))
    for (job, slot_ms), run in sorted(succeeded.items()):
        if (job, slot_ms) not in per_slot:
            detail = f"attempt {run.attempt} on {run.node}, token {run.token}"
            found.append(Violation("success without its effect", job, slot_ms, detail))
    summary = f"{len(jobs)} jobs, {len(succeeded)} slots succeeded, {len(rows)} rows"
    return CheckResult("exactly-once effects", summary, found)


def allow_lateness_s(obs: Observations, hold_s: float, max_concurrent: int) -> float:
    """How long after its slot an allow job's slot may start (see ``ALLOW_SLACK_S``)."""
    worst = max((f.bound_s for f in obs.faults), default=obs.kill_bound_s)
    return worst + max_concurrent * hold_s + ALLOW_SLACK_S


def _reclaimed(obs: Observations, first: Execution, again: Execution) -> bool:
    """``again`` ran ``first``'s attempt after a failover lost its claim (``--pg-async``)."""
    same = (first.attempt, first.slot_ms) == (again.attempt, again.slot_ms)
    return same and first.at < again.at and lost_claim(obs, first, again) is not None


def _intervals(obs: Observations, runs: list[Execution]) -> list[tuple[float, float]]:
    """Each execution's time surely spent running: [start, start + hold], cut at the start
    of the same slot's next attempt (the same attempt run twice is not cut: it overlaps)."""
    by_slot: dict[int, list[Execution]] = defaultdict(list)
    for e in runs:
        by_slot[e.slot_ms].append(e)
    found = []
    for attempts in by_slot.values():
        attempts.sort(key=lambda e: (e.attempt, e.at))
        for e in attempts:
            end = e.at + obs.jobs[e.job].sleep_s
            later = [a.at for a in attempts if a.attempt > e.attempt or _reclaimed(obs, e, a)]
            if later:
                end = max(e.at, min(end, *later))
            found.append((e.at, end))
    return found


def _most_at_once(intervals: list[tuple[float, float]]) -> int:
    """The largest number of intervals open at one moment (one ending as another starts
    does not count as overlap)."""
    edges = sorted([(start, 1) for start, _ in intervals] + [(end, -1) for _, end in intervals])
    most = current = 0
    for _, step in edges:  # at equal times, -1 sorts first
        current += step
        most = max(most, current)
    return most


def _first_starts(executions: list[Execution]) -> list[Execution]:
    """The first execution of each slot of one job, oldest slot first."""
    first: dict[int, Execution] = {}
    for e in executions:
        if e.slot_ms not in first or e.at < first[e.slot_ms].at:
            first[e.slot_ms] = e
    return [first[slot_ms] for slot_ms in sorted(first)]


def _late_starts(
    obs: Observations, starts: list[Execution], bound_s: float, found: list[Violation]
) -> float:
    """Adds a violation for each start during the phase more than ``bound_s`` after its
    slot; returns the latest start seen."""
    worst = 0.0
    for e in starts:
        lag = e.at - obs.slot_time(e.slot_ms)
        worst = max(worst, lag)
        if lag > bound_s and obs.phase_start <= e.at <= obs.phase_end:
            detail = f"started {lag:.2f}s after its slot on {e.node}; bound {bound_s:.1f}s"
            found.append(Violation("slot started late", e.job, e.slot_ms, detail))
    return worst


def allow_slots(obs: Observations) -> CheckResult | None:
    jobs = {name: job for name, job in obs.jobs.items() if job.kind == "allow"}
    if not jobs:
        return None
    found: list[Violation] = []
    per_job: dict[str, list[Execution]] = defaultdict(list)
    for e in obs.executions:
        if e.job in jobs:
            per_job[e.job].append(e)
    seen: dict[tuple[str, int, int], Execution] = {}
    for e in sorted((e for runs in per_job.values() for e in runs), key=lambda e: e.at):
        key = (e.job, e.slot_ms, e.attempt)
        if key in seen and not _reclaimed(obs, seen[key], e):
            detail = f"attempt {e.attempt} ran on {seen[key].node} and again on {e.node}"
            found.append(Violation("attempt executed twice", e.job, e.slot_ms, detail))
        seen[key] = e
    succeeded = Counter(
        (r.job, r.slot_ms) for r in obs.runs if r.job in jobs and r.status == RunStatus.SUCCEEDED
    )
    for (job, slot_ms), count in sorted(succeeded.items()):
        if count > 1:
            found.append(Violation("slot succeeded twice", job, slot_ms, f"{count} runs rows"))
    most = 0
    worst_lag = 0.0
    for name, runs in sorted(per_job.items()):
        info = jobs[name]
        at_once = _most_at_once(_intervals(obs, runs))
        most = max(most, at_once)
        if at_once > info.max_concurrent:
            detail = f"{at_once} executions at once, {info.max_concurrent} allowed"
            found.append(Violation("too many at once", name, None, detail))
        bound = allow_lateness_s(obs, info.sleep_s, info.max_concurrent)
        worst_lag = max(worst_lag, _late_starts(obs, _first_starts(runs), bound, found))
    _, lost = find_lost(obs)
    lost_here = sum(1 for v in lost if v.job in jobs)
    allowed = max(job.max_concurrent for job in jobs.values())
    summary = (
        f"{len(jobs)} jobs, {sum(succeeded.values())} slots succeeded ({lost_here} lost), "
        f"at most {most} at once ({allowed} allowed), latest start {worst_lag:.2f}s"
    )
    return CheckResult("allow slots", summary, found)


def replace_lateness_s(obs: Observations) -> float:
    """How long after its slot a replace job's slot may start (see ``REPLACE_SLACK_S``)."""
    worst = max((f.bound_s for f in obs.faults), default=obs.kill_bound_s)
    return worst + REPLACE_SLACK_S


def replace_slots(obs: Observations) -> CheckResult | None:
    jobs = {name: job for name, job in obs.jobs.items() if job.kind == "replace"}
    if not jobs:
        return None
    found: list[Violation] = []
    runs = {(r.job, r.slot_ms): r for r in obs.runs if r.job in jobs}
    per_job: dict[str, list[Execution]] = defaultdict(list)
    for e in obs.executions:
        if e.job in jobs:
            per_job[e.job].append(e)
    bound = replace_lateness_s(obs)
    replaced = 0
    worst_lag = 0.0
    for name, executions in sorted(per_job.items()):
        ordered = _first_starts(executions)
        for e, successor in itertools.pairwise(ordered):
            run = runs.get((name, e.slot_ms))
            if run is None or run.attempt > 1 or successor.at >= e.at + jobs[name].sleep_s:
                continue  # not overlapped by its successor, or a fault took an attempt
            replaced += 1
            if run.status == RunStatus.SUCCEEDED:
                detail = f"the next slot started {successor.at - e.at:.2f}s after it, on {e.node}"
                found.append(Violation("replaced run succeeded", name, e.slot_ms, detail))
        worst_lag = max(worst_lag, _late_starts(obs, ordered, bound, found))
    summary = f"{len(jobs)} jobs, {replaced} runs replaced, latest start {worst_lag:.2f}s"
    return CheckResult("replace slots", summary, found)


def zone_placement(obs: Observations) -> CheckResult | None:
    jobs = {name: job for name, job in obs.jobs.items() if job.kind == "pinned"}
    if not jobs:
        return None
    found: list[Violation] = []
    checked = 0
    for e in obs.executions:
        info = jobs.get(e.job)
        if info is None:
            continue
        checked += 1
        zone = obs.node_zones.get(e.node)
        if zone not in info.zones:
            where = f"{e.node} in {zone or 'an unknown zone'}"
            detail = f"attempt {e.attempt} ran on {where}; pinned to {','.join(info.zones)}"
            found.append(Violation("ran outside its zones", e.job, e.slot_ms, detail))
    darkened = sum(1 for fault in obs.faults for name in jobs if dark(obs, fault, name))
    summary = f"{len(jobs)} jobs, {checked} executions, {darkened} dark through a fault"
    return CheckResult("zone placement", summary, found)


def skip_reasons(obs: Observations) -> CheckResult | None:
    found = catch_up_skips(obs)
    return None if found is None else CheckResult("catch-up skips", *found)


def blip_shards(obs: Observations) -> CheckResult | None:
    found = blips_move_no_shard(obs)
    return None if found is None else CheckResult("blips move no shard", *found)


def dependencies(obs: Observations) -> CheckResult | None:
    jobs = {name: job for name, job in obs.jobs.items() if job.after}
    if not jobs:
        return None
    runs = {(r.job, r.slot_ms): r for r in obs.runs}
    first = Counter((e.job, e.slot_ms) for e in obs.executions if e.job in jobs and e.attempt == 1)
    found = [
        Violation("downstream slot ran twice", job, slot_ms, f"attempt 1 witnessed {n} times")
        for (job, slot_ms), n in sorted(first.items())
        if n > 1
    ]
    executions = [e for e in obs.executions if e.job in jobs]
    for e in executions:
        for upstream in jobs[e.job].after:
            up = runs.get((upstream, e.slot_ms))
            if up is None or up.status != RunStatus.SUCCEEDED or up.finished_at is None:
                status = "no run row" if up is None else f"run {up.status}"
                detail = f"attempt {e.attempt} on {e.node}; {upstream}: {status}"
            elif e.at < up.finished_at - DEPENDENCY_CLOCK_SLACK_S:
                detail = f"started {up.finished_at - e.at:.3f}s before {upstream} completed"
            else:
                continue
            found.append(Violation("ran before its upstream succeeded", e.job, e.slot_ms, detail))
    start_ms = (obs.window_start + obs.clock_offset_s) * 1000
    end_ms = (obs.window_end + obs.clock_offset_s) * 1000
    succeeded = {(r.job, r.slot_ms) for r in obs.runs if r.status == RunStatus.SUCCEEDED}
    released = 0
    for name, info in jobs.items():
        slots = set.intersection(*({s for j, s in succeeded if j == u} for u in info.after))
        for slot_ms in sorted(s for s in slots if start_ms <= s <= end_ms):
            released += 1
            if (name, slot_ms) not in runs:
                detail = f"every upstream succeeded ({', '.join(info.after)})"
                found.append(Violation("released slot never ran", name, slot_ms, detail))
    summary = f"{len(jobs)} downstream jobs, {released} slots released, {len(executions)} runs"
    return CheckResult("dependencies", summary, found)


def key_limits(obs: Observations) -> CheckResult | None:
    users = {name: job.uses for name, job in obs.jobs.items() if job.uses}
    if not users or not obs.keys:
        return None
    found: list[Violation] = []
    counted, peaks = 0, []
    for key, limit in sorted(obs.keys.items()):
        runs = [r for r in obs.runs if key in users.get(r.job, ()) and r.started_at is not None]
        runs = [r for r in runs if r.finished_at is not None]
        counted += len(runs)
        # Ends before starts at one instant: a run that took the place its predecessor gave
        # back is not counted with it.
        edges = sorted(
            [(r.finished_at or 0.0, -1, i) for i, r in enumerate(runs)]
            + [(r.started_at or 0.0, 1, i) for i, r in enumerate(runs)]
        )
        at_once = peak = 0
        for _, step, i in edges:
            at_once += step
            if at_once > limit and step > 0:
                run = runs[i]
                detail = f"{at_once} runs held {key} (limit {limit}), attempt {run.attempt}"
                found.append(Violation("key above its limit", run.job, run.slot_ms, detail))
            peak = max(peak, at_once)
        peaks.append(f"{key} at most {peak} of {limit}")
    keys = f"{len(obs.keys)} key" + ("s" if len(obs.keys) > 1 else "")
    summary = f"{keys}, {counted} runs, " + ", ".join(peaks)
    return CheckResult("key limits", summary, found)


CHECKS: tuple[Callable[[Observations], CheckResult | None], ...] = (
    exactly_once_effects,
    allow_slots,
    replace_slots,
    zone_placement,
    blip_shards,
    dependencies,
    key_limits,
    skip_reasons,
)


def run_checks(obs: Observations) -> list[CheckResult]:
    """The result of every check that applies to the run, in ``CHECKS`` order."""
    return [result for check in CHECKS if (result := check(obs)) is not None]
