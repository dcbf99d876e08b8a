"""The ``catch-up skips`` check (pure): a slot recorded skipped as missed says what is true
of it. The common loss check counts a skipped slot accounted for, whatever its reason; the
slot ledger asks more (every slot runs once or is recorded skipped with its true reason),
so every record whose reason is catch-up's (``missed by <late> (catch-up <policy> ...)``,
cluster/timing/fate.py) is read against the job and the rest of the runs:

- the policy it names is the job's;
- with ``skip``, the slot was missed by more than the job's grace;
- it was written no sooner than its slot plus how late it says the slot was (the record
  comes from the claim that found the slot missed, so a record written earlier lies);
- with ``once``, the slot it was coalesced into comes after it and has a record of its
  own, unless that slot lies past the window.

Gate skips are the ``dependencies`` check's; other reasons (a window, a pause) do not
occur in the chaos workload.
"""

from __future__ import annotations

import re
from datetime import datetime

from cluster.chaos.verdict.observations import Observations, RunRecord, to_ms
from cluster.chaos.verdict.safety import Violation
from cluster.jobs.models import RunStatus
from cluster.timing.durations import parse_duration

MISSED = re.compile(
    r"missed by (?P<late>\S+) \(catch-up (?P<policy>skip|once|backfill)"
    r"(?:: coalesced into (?P<into>[^)\s]+))?"
)
# The reason rounds how late the slot was to the millisecond.
ROUNDING_S = 0.001


def catch_up_skips(obs: Observations) -> tuple[str, list[Violation]] | None:
    """(summary, violations) over the records skipped by catch-up, None without any."""
    records = {(r.job, r.slot_ms): r for r in obs.runs}
    found: list[Violation] = []
    checked = 0
    for run in obs.runs:
        said = _said(run)
        if said is None or run.job not in obs.jobs:
            continue  # the poison job is held to its own rule
        checked += 1
        detail = _untrue(obs, run, said, records)
        if detail is not None:
            found.append(Violation("skip reason untrue", run.job, run.slot_ms, detail))
    if not checked:
        return None
    return f"{checked} slots skipped as missed", found


def _said(run: RunRecord) -> re.Match[str] | None:
    if run.status != RunStatus.SKIPPED or run.reason is None:
        return None
    return MISSED.search(run.reason)


def _untrue(
    obs: Observations,
    run: RunRecord,
    said: re.Match[str],
    records: dict[tuple[str, int], RunRecord],
) -> str | None:
    """What the reason of ``run`` says that is not so, or None."""
    job = obs.jobs[run.job]
    late = parse_duration(said["late"])
    policy = said["policy"]
    if policy != job.catch_up:
        return f"names catch-up {policy}; the job's is {job.catch_up}"
    if policy == "skip" and late + ROUNDING_S < job.grace_s:
        return f"missed by {late:.3f}s, within the job's grace of {job.grace_s:g}s"
    slot_at = obs.slot_time(run.slot_ms)
    if run.finished_at is not None and run.finished_at + ROUNDING_S < slot_at + late:
        written = run.finished_at - slot_at
        return f"says missed by {late:.3f}s, recorded {written:.3f}s after its slot"
    if said["into"] is not None:
        into_ms = to_ms(datetime.fromisoformat(said["into"]))
        if into_ms <= run.slot_ms:
            return f"coalesced into {said['into']}, not after it"
        if (run.job, into_ms) not in records and obs.slot_time(into_ms) <= obs.window_end:
            return f"coalesced into {said['into']}, which has no record"
    return None
