"""The verdict of a chaos run: every check combined, printed as a table or written as JSON.

A run passes when ``pulse audit`` over the window finds no slot missing and no record
overwritten, there is no safety violation (double execution, unexplained execution
or completion, early fire, re-run no fault explains, a poison slot run more than retries + 1
times or not recorded failed), no lost slot, no node that exited on its own (but for those
the poison job killed), every fault's gap and unheld stretch stayed within its bound, and
every named check of a job kind (``checks``: exactly-once effects) found nothing wrong.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from typing import Any

from cluster.chaos.verdict.failover import Unheld, fault_gaps, unheld_stretches
from cluster.chaos.verdict.kinds import CheckResult, run_checks
from cluster.chaos.verdict.observations import AuditFinding, Observations
from cluster.chaos.verdict.safety import (
    CLAIM_LOST,
    LEASE_LOST,
    PoisonSummary,
    Rerun,
    Violation,
    check_executions,
    check_poison,
    find_lost,
    find_reruns,
)
from cluster.chaos.verdict.safety import unattributed as unattributed_reruns
from cluster.jobs.ledger import FAILING
from cluster.jobs.models import RunStatus

SHOWN = 10


@dataclass(frozen=True)
class FaultRow:
    kind: str
    target: str
    at_s: float  # from the start of the fault phase
    hold_s: float
    affected_jobs: int
    max_gap_s: float
    worst_job: str | None
    max_unheld_s: float
    reruns: int
    bound_s: float
    ok: bool
    detail: str
    measured_s: float | None = None  # a failover's promotion (pg) or settling (redis) time
    job_gaps: dict[str, float] | None = None  # a failover's gap of every job it touched


@dataclass
class Report:
    settings: Mapping[str, Any]
    faults: list[FaultRow]
    violations: list[Violation]
    lost: list[Violation]
    reruns: list[Rerun]
    expected_slots: int
    executions: int
    runs: int
    skipped: int
    max_unheld: Unheld | None
    coverage_breaches: list[Unheld]  # unheld stretches no fault explains, beyond the bound
    log_events: Mapping[str, int]
    node_exits: list[str] = field(default_factory=list)
    poison: PoisonSummary | None = None
    checks: list[CheckResult] = field(default_factory=list)
    audit_counts: Mapping[str, int] = field(default_factory=dict)
    audit_findings: list[AuditFinding] = field(default_factory=list)

    @property
    def audit_failures(self) -> list[AuditFinding]:
        """The slots the ledger rule is broken for: missing or overwritten."""
        return [f for f in self.audit_findings if f.verdict in FAILING]

    @property
    def bounds_ok(self) -> bool:
        return all(row.ok for row in self.faults) and not self.coverage_breaches

    @property
    def passed(self) -> bool:
        problems = self.violations or self.lost or self.node_exits or self.audit_failures
        return not problems and self.bounds_ok and all(check.ok for check in self.checks)

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["passed"] = self.passed
        data["bounds_ok"] = self.bounds_ok
        items = [*data["violations"], *data["lost"], *data["reruns"], *data["audit_findings"]]
        for check in data["checks"]:
            check["ok"] = not check["violations"]
            items += check["violations"]
        for item in items:
            item["slot"] = _iso(item.pop("slot_ms"))
        return data


def _iso(slot_ms: int | None) -> str | None:
    if slot_ms is None:
        return None
    return datetime.fromtimestamp(slot_ms / 1000, UTC).isoformat()


def build_report(obs: Observations, settings: Mapping[str, Any]) -> Report:
    reruns = find_reruns(obs)
    expected, lost = find_lost(obs)
    poison, poison_violations = check_poison(obs)
    stretches = unheld_stretches(obs)
    gaps = fault_gaps(obs)
    rows = []
    for index, fault in enumerate(obs.faults):
        gap = gaps[index]
        mine = [u.duration_s for u in stretches if u.fault == index]
        unheld = max(mine, default=0.0)
        rows.append(
            FaultRow(
                kind=fault.kind,
                target=fault.label,
                at_s=round(fault.started - obs.phase_start, 1),
                hold_s=round(fault.ended - fault.started, 1),
                affected_jobs=gap.affected,
                max_gap_s=round(gap.gap_s, 2),
                worst_job=gap.job,
                max_unheld_s=round(unheld, 2),
                reruns=sum(1 for r in reruns if r.fault == index),
                bound_s=round(fault.bound_s, 1),
                ok=max(gap.gap_s, unheld, fault.measured_s or 0.0) <= fault.bound_s,
                detail=fault.detail,
                measured_s=None if fault.measured_s is None else round(fault.measured_s, 2),
                job_gaps=gap.per_job if fault.measured_s is not None else None,
            )
        )
    return Report(
        settings=dict(settings),
        faults=rows,
        violations=check_executions(obs) + unattributed_reruns(reruns) + poison_violations,
        lost=lost,
        reruns=reruns,
        expected_slots=expected,
        executions=len(obs.executions),
        runs=len(obs.runs),
        skipped=sum(1 for r in obs.runs if r.status == RunStatus.SKIPPED),
        max_unheld=max(stretches, key=lambda u: u.duration_s, default=None),
        coverage_breaches=[u for u in stretches if u.fault is None and u.duration_s > u.bound_s],
        log_events=dict(obs.log_events),
        node_exits=list(obs.node_exits),
        poison=poison,
        checks=run_checks(obs),
        audit_counts=dict(obs.audit_counts),
        audit_findings=list(obs.audit_findings),
    )


def _secs(value: float) -> str:
    return f"{value:.2f}s"


def render_table(report: Report) -> str:
    """The human summary: one row per fault, then the totals and the verdict."""
    s = report.settings
    lines = [
        f"pulse chaos: seed {s.get('seed')}, {s.get('nodes')} nodes in {s.get('zones')} zones, "
        f"{s.get('jobs')} jobs, {s.get('duration_s')}s of faults, "
        f"session timeout {s.get('session_timeout_s')}s",
        "",
    ]
    header = ["FAULT", "TARGET", "AT", "HOLD", "JOBS", "MAX GAP", "UNHELD", "RE-RUNS", "BOUND", ""]
    body = [
        [
            row.kind,
            row.target,
            f"+{row.at_s:.1f}s",
            f"{row.hold_s:.1f}s",
            str(row.affected_jobs),
            _secs(row.max_gap_s),
            _secs(row.max_unheld_s),
            str(row.reruns),
            f"{row.bound_s:.1f}s",
            "ok" if row.ok else "EXCEEDED",
        ]
        for row in report.faults
    ]
    table = [header, *body]
    widths = [max(len(r[i]) for r in table) for i in range(len(header))]
    lines += ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in table]
    for row in report.faults:
        if row.measured_s is not None:
            lines.append(
                f"  {row.kind} at +{row.at_s:.1f}s: {row.detail}; longest gap of any job "
                f"{_secs(row.max_gap_s)} ({row.worst_job or '-'}), bound {row.bound_s:.1f}s"
            )
    events = report.log_events
    worst = report.max_unheld
    unheld = "none" if worst is None else f"{_secs(worst.duration_s)} (shard {worst.shard})"
    blamed = sum(1 for r in report.reruns if r.fault is not None and r.cause == LEASE_LOST)
    claims_lost = sum(1 for r in report.reruns if r.cause == CLAIM_LOST)
    lines += [
        "",
        f"slots expected        {report.expected_slots} (lost: {len(report.lost)})",
        f"executions            {report.executions} (runs rows {report.runs}, "
        f"skipped by catch-up {report.skipped})",
        f"re-runs (lost lease)  {blamed} attributed to faults "
        f"({sum(r.late for r in report.reruns)} witnessed after their successor)",
        *(
            [f"claims lost           {claims_lost} (asynchronous replication: run again)"]
            if claims_lost
            else []
        ),
        f"safety violations     {len(report.violations)}",
        f"longest unheld shard  {unheld}",
        f"fenced writes         {events.get('fenced_write', 0)} "
        f"(recovered runs {events.get('run_recovered', 0)}, "
        f"lock sessions lost {events.get('session_lost', 0) + events.get('session_untrusted', 0)})",
        f"node exits            {', '.join(report.node_exits) or 'none'}",
    ]
    if report.poison is not None:
        p = report.poison
        lines.append(
            f"poison job            {p.slots} slots, {p.executions} nodes killed "
            f"(at most {p.most_per_slot} per slot, {p.allowed_per_slot} allowed)"
        )
    if report.audit_counts:
        counts = ", ".join(f"{v} {n}" for v, n in report.audit_counts.items() if n)
        lines.append(f"pulse audit           {counts or 'no slot'}")
    for check in report.checks:
        verdict = "ok" if check.ok else f"{len(check.violations)} VIOLATIONS"
        lines.append(f"{check.name:<21} {verdict} ({check.summary})")
    shown = [("VIOLATION", report.violations), ("LOST", report.lost)]
    shown += [(f"CHECK {c.name}", c.violations) for c in report.checks]
    for title, items in shown:
        for v in items[:SHOWN]:
            lines.append(f"  {title}: {v.kind}: {v.job} slot {_iso(v.slot_ms)}: {v.detail}")
        if len(items) > SHOWN:
            lines.append(f"  ... and {len(items) - SHOWN} more ({title.lower()})")
    failures = report.audit_failures
    for f in failures[:SHOWN]:
        lines.append(f"  AUDIT: {f.verdict}: {f.job} slot {_iso(f.slot_ms)}: {f.detail}")
    if len(failures) > SHOWN:
        lines.append(f"  ... and {len(failures) - SHOWN} more (audit)")
    for u in report.coverage_breaches[:SHOWN]:
        lines.append(f"  COVERAGE: shard {u.shard} unheld {_secs(u.duration_s)} with no fault")
    lines.append("")
    lines.append("RESULT: " + ("PASS" if report.passed else "FAIL"))
    return "\n".join(lines)
