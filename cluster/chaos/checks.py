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
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

from cluster.chaos.observations import Observations
from cluster.chaos.safety import Violation


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
    succeeded = {key: r for key, r in runs.items() if r.status == "succeeded"}
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
        if run is None or run.status != "succeeded":
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


CHECKS: tuple[Callable[[Observations], CheckResult | None], ...] = (exactly_once_effects,)


def run_checks(obs: Observations) -> list[CheckResult]:
    """The result of every check that applies to the run, in ``CHECKS`` order."""
    return [result for check in CHECKS if (result := check(obs)) is not None]
