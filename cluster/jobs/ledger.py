"""The slot ledger, pure: which slots a job should have had over a time range (from its
definitions over time, ``cluster.jobs.spans``) and, merged with what Pulse recorded for
them, one verdict per slot.

``pulse audit``, ``GET /api/audit``, the console's slot strip and ``pulse chaos``'s verdict
all classify with ``audit_job``; the store only streams rows into it, in slot order, so a
week of minute slots is never held in memory (docs/design/audit.md).
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, NamedTuple

from cluster.jobs.models import RunStatus
from cluster.jobs.spans import Span

__all__ = [
    "FAILING",
    "VERDICTS",
    "Coalesced",
    "Job",
    "JobAudit",
    "Line",
    "Prior",
    "Record",
    "Summary",
    "audit_job",
]

# One per line, in the order the summary shows them. `missing` and `overwritten` break the
# ledger rule; `paused` is a slot a `pause --until` passed over, not to run; `pruned` one
# without a record older than its job's retention keeps (its record may have been pruned:
# the audit cannot tell); `unaligned` is a record on no expected slot (a trigger, a
# backfill).
VERDICTS = (
    "ran",
    "reran",
    "skipped",
    "paused",
    "pruned",
    "running",
    "waiting",
    "pending",
    "missing",
    "overwritten",
    "unaligned",
)
FAILING = frozenset({"missing", "overwritten"})
RETRIED = (RunStatus.FAILED, RunStatus.TIMED_OUT)
UNDECIDED = (RunStatus.RUNNING, RunStatus.LOST)  # a state any later one may replace
UNRUN = (RunStatus.SKIPPED, RunStatus.RUNNING)
ASKED = ("rerun", "backfill")  # origins of a slot run again because someone asked


@dataclass(frozen=True)
class Prior:
    """An earlier state of a slot's run row, as the row held it before a later write."""

    status: str
    attempt: int
    node: str | None
    token: int | None
    error: str | None
    origin: str | None
    replaced_at: datetime
    started: datetime | None = None

    @classmethod
    def from_json(cls, item: Mapping[str, Any]) -> Prior:
        """One entry of a run row's ``history`` (the trigger of migration run_history)."""
        return cls(
            status=str(item.get("status")),
            attempt=int(item.get("attempt") or 1),
            node=item.get("node"),
            token=item.get("token"),
            error=item.get("error"),
            origin=item.get("origin"),
            replaced_at=datetime.fromisoformat(str(item.get("replaced_at"))),
            started=datetime.fromisoformat(item["started"]) if item.get("started") else None,
        )


class Record(NamedTuple):
    """A slot's run row, with the states it held before (oldest first). Named tuples, as
    ``Line``: one of each per slot, so how fast they are made counts."""

    slot: datetime
    status: str
    attempt: int
    node: str | None = None
    token: int | None = None
    origin: str | None = None
    error: str | None = None
    priors: tuple[Prior, ...] = ()
    started: datetime | None = None  # when the attempt recorded began
    waited: str | None = None  # how long the slot waited for a named limit, and which


class Coalesced(NamedTuple):
    """A skipped record that also stands for the slots before it without a row of their
    own: every slot in ``[since, until)`` was skipped for ``reason`` (``runs.skipped_from``:
    a long outage's catch-up or apply lists the newest 1,000 slots it passes)."""

    since: datetime
    until: datetime  # the record's own slot
    reason: str


@dataclass(frozen=True)
class Job:
    """What the audit needs of one job besides its records: its definitions over time, the
    chained slots released to it, and where it stands now."""

    tenant: str
    name: str
    spans: tuple[Span, ...]
    chained: tuple[datetime, ...] = ()  # slots released to a chained job, in order
    position: datetime | None = None  # the slot the job is at (its current slot_at)
    waiting: bool = False  # that slot is held (a gate, a retry's backoff, a key, its tenant's
    # limit): not missing yet
    in_flight: frozenset[datetime] = frozenset()  # slots whose attempt runs now
    done_after: datetime | None = None  # a finished job (max_runs, one-off): no slot later
    coalesced: tuple[Coalesced, ...] = ()  # skipped records standing for earlier slots
    # Retention may have pruned the records of the slots before this (the job's keep_for
    # or keep_runs, whichever reaches later): one missing there is `pruned`, not `missing`.
    kept_from: datetime | None = None
    kept_by: str = ""  # which of the two, for the line's detail
    # The records before the range that count toward max_runs, and the slot of the newest:
    # an audit from the middle of the job's history counts from its start.
    ran_before: int = 0
    last_ran_before: datetime | None = None

    def span_at(self, slot: datetime) -> Span | None:
        """The definition in force at ``slot`` (the one before an edit at its instant)."""
        return next((s for s in reversed(self.spans) if s.start < slot), None)

    def timing_changed(self, slot: datetime) -> datetime | None:
        """When the job was last given another schedule before ``slot``, if ever."""
        changes = (s.start for s in reversed(self.spans) if s.new_timing and s.start < slot)
        return next(changes, None)

    def behind(self, slot: datetime) -> bool:
        """Whether ``slot`` comes after the job's current slot while that one is held or
        runs: the job has not reached it, and decides it (runs or records it) once it
        moves on, as catch-up decides an outage's slots."""
        position = self.position
        return (
            position is not None
            and slot > position
            and (self.waiting or position in self.in_flight)
        )

    def standing_for(self, slot: datetime) -> Coalesced | None:
        """The skipped record that stands for ``slot``, which has no row of its own."""
        return next((c for c in self.coalesced if c.since <= slot < c.until), None)

    def paused_over(self, slot: datetime) -> bool:
        """Whether ``slot`` is a slot of the job's schedule that a pause passed over."""
        return any(span.paused_over(slot) for span in self.spans)

    def held_at(self, slot: datetime) -> datetime | None:
        """The time of the ``pause --until`` that passed over ``slot``, or None."""
        for span in self.spans:
            held = span.held()
            if held is not None and held[0] < slot < held[1]:
                return span.paused_until
        return None


class Line(NamedTuple):
    tenant: str
    job: str
    slot: datetime
    verdict: str  # one of VERDICTS
    outcome: str | None = None  # the run row's status
    node: str | None = None
    attempts: int = 0
    token: int | None = None
    origin: str | None = None
    detail: str = ""

    def to_json(self) -> dict[str, Any]:
        return {
            "tenant": self.tenant,
            "job": self.job,
            "slot": self.slot.isoformat(),
            "verdict": self.verdict,
            "outcome": self.outcome,
            "node": self.node,
            "attempts": self.attempts,
            "token": self.token,
            "origin": self.origin,
            "detail": self.detail,
        }


@dataclass
class Summary:
    """Counts per verdict per (tenant, job), in the order jobs were audited."""

    counts: dict[tuple[str, str], dict[str, int]] = field(default_factory=dict)
    lines: int = 0

    def add(self, line: Line) -> None:
        per = self.counts.setdefault((line.tenant, line.job), dict.fromkeys(VERDICTS, 0))
        per[line.verdict] += 1
        self.lines += 1

    def total(self, verdict: str) -> int:
        return sum(per[verdict] for per in self.counts.values())

    @property
    def failing(self) -> bool:
        return any(self.total(v) for v in FAILING)

    def to_json(self) -> dict[str, Any]:
        return {
            "jobs": [
                {"tenant": tenant, "job": job, **per} for (tenant, job), per in self.counts.items()
            ],
            "total": {v: self.total(v) for v in VERDICTS},
        }


def expected(job: Job, start: datetime, end: datetime) -> Iterator[datetime]:
    """The slots ``job`` should have had in ``[start, end)``, in order: each span's
    schedule's slots strictly after the span began (none while paused), or the chained
    slots released to it. Those after it finished are slots still, owed nothing
    (``JobAudit``): a record there is on its slot (an apply that made the job done records
    the slots it owed then)."""
    if job.chained:
        return (s for s in job.chained if start <= s < end)
    return itertools.chain.from_iterable(span.slots(start, end) for span in job.spans)


class JobAudit:
    """The merge of one job's expected slots in ``[start, end)`` with its run rows, fed in
    slot order as they stream in: every line comes out in slot order, and nothing but the
    next expected slot is held. A slot without a record is ``missing`` once due before
    ``cutoff`` (the audit's time minus its grace), unless its attempt runs now or the job
    is held at it."""

    def __init__(self, job: Job, start: datetime, end: datetime, cutoff: datetime) -> None:
        self.job = job
        self._cutoff = cutoff
        self._slots = expected(job, start, end)
        self._next = next(self._slots, None)
        self._ran = job.ran_before  # the records so far that count toward max_runs
        self._last_ran = job.last_ran_before  # the slot of the latest of them

    def feed(self, row: Record) -> Iterator[Line]:
        """The lines up to and including ``row``'s slot."""
        while self._next is not None and self._next < row.slot:
            yield from self._unrecorded(self._next)
            self._next = next(self._slots, None)
        if self._next == row.slot:
            yield _recorded(self.job, row)
            self._next = next(self._slots, None)
        elif row.status == RunStatus.SKIPPED and self.job.paused_over(row.slot):
            yield _recorded(self.job, row)  # recorded skipped ahead, then the job paused
        else:
            yield _unaligned(self.job, row)
        if row.status not in UNRUN and row.origin not in ASKED:
            self._ran, self._last_ran = self._ran + 1, row.slot

    def close(self) -> Iterator[Line]:
        """The lines of the expected slots after the last record."""
        while self._next is not None:
            yield from self._unrecorded(self._next)
            self._next = next(self._slots, None)

    def _unrecorded(self, slot: datetime) -> Iterator[Line]:
        """The line of an expected slot without a record, or none while the job was done."""
        done_after = self.job.done_after
        if (done_after is None or slot <= done_after) and not self._done_at(slot):
            yield _unrecorded(self.job, slot, self._cutoff)

    def _done_at(self, slot: datetime) -> bool:
        """Whether the job was done at ``slot``: its runs (the records before it that ran,
        but for an operator's re-runs) reached the max_runs of the definition in force,
        the last of them since its schedule last changed (which makes a done job idle
        again, until its next run)."""
        span, last = self.job.span_at(slot), self._last_ran
        if span is None or span.max_runs is None or last is None or self._ran < span.max_runs:
            return False
        changed = self.job.timing_changed(slot)
        return changed is None or last >= changed


def audit_job(
    job: Job, records: Iterable[Record], start: datetime, end: datetime, cutoff: datetime
) -> Iterator[Line]:
    """One line per expected slot of ``job`` in ``[start, end)`` and per record on no
    expected slot, in slot order (``records``: the job's run rows there, in slot order)."""
    merge = JobAudit(job, start, end, cutoff)
    for row in records:
        yield from merge.feed(row)
    yield from merge.close()


def _unrecorded(job: Job, slot: datetime, cutoff: datetime) -> Line:
    if slot in job.in_flight:
        verdict, detail = "running", "an attempt runs now"
    elif slot == job.position and job.waiting:
        verdict, detail = (
            "waiting",
            "the job's current slot, held (a gate, a retry's backoff, a key, its tenant's limit)",
        )
    elif (record := job.standing_for(slot)) is not None:
        detail = f"{record.reason} (listed under {record.until.isoformat()})"
        return Line(job.tenant, job.name, slot, "skipped", "skipped", detail=detail)
    elif (until := job.held_at(slot)) is not None:
        verdict, detail = "paused", f"passed over by pause --until {until.isoformat()}"
    elif job.behind(slot):
        verdict, detail = "waiting", "behind the job's held or running slot: decided after it"
    elif slot >= cutoff:
        verdict, detail = "pending", "due within the grace"
    elif job.kept_from is not None and slot < job.kept_from:
        kept = f"older than the job's retention keeps ({job.kept_by})"
        verdict, detail = "pruned", f"no record, {kept}: pruned, or never written"
    else:
        verdict, detail = "missing", "no run and no skipped record"
    return Line(job.tenant, job.name, slot, verdict, detail=detail)


def _unaligned(job: Job, row: Record) -> Line:
    why = {"trigger": "a trigger: not a slot", "backfill": "a backfill: not a slot"}
    detail = why.get(row.origin or "", "a record on no slot of the definition in force")
    return _line(job, row, "unaligned", detail)


def _recorded(job: Job, row: Record) -> Line:
    if not row.priors and row.attempt <= 1 and row.status not in UNRUN:
        return _line(job, row, "ran", row.error or "")  # nearly every slot: one attempt
    overwrite = _overwrite(row)
    if overwrite:
        return _line(job, row, "overwritten", overwrite)
    if row.status == RunStatus.SKIPPED:
        return _line(job, row, "skipped", row.error or "")
    if row.status == RunStatus.RUNNING:
        return _line(job, row, "running", "an attempt runs now")
    starts = [p for p in row.priors if p.status not in (RunStatus.RUNNING, RunStatus.SKIPPED)]
    if not starts and row.attempt <= 1:
        return _line(job, row, "ran", row.error or "")
    states: list[Prior | Record] = [*starts, row]
    why = [_why(p, after) for p, after in itertools.pairwise(states)]
    if not starts:
        why.append(f"{row.attempt - 1} earlier attempt(s), not recorded")
    why.append(_attempt(row))
    return _line(job, row, "reran", "; ".join(why))


def _why(prior: Prior | Record, after: Prior | Record) -> str:
    what = _attempt(prior)
    if after.origin in ASKED and prior.status not in (RunStatus.LOST, *RETRIED):
        return f"{what}: re-run asked ({after.origin})"
    if prior.status == RunStatus.LOST:
        return f"{what} ({prior.error or '-'}): re-run after node death"
    return f"{what}: retried"


def _attempt(state: Prior | Record) -> str:
    """One start of a slot: its attempt, how it ended, on which node, when it began."""
    began = "" if state.started is None else f" started {state.started.isoformat()}"
    return f"attempt {state.attempt} {state.status} on {state.node or '-'}{began}"


def _overwrite(row: Record) -> str:
    """Why the row's history shows a final record replaced, or ''. A retry follows a failed
    attempt with the next, a lost attempt may end any way, an operator's re-run of a slot
    (``trigger --slot``) replaces what it likes; anything else replacing a final state
    (succeeded, skipped, cancelled, a failed attempt not retried) is an overwrite."""
    states: list[Prior | Record] = [*row.priors, row]
    for before, after in itertools.pairwise(states):
        if after.origin in ASKED or before.status in UNDECIDED:
            continue
        if before.status in RETRIED and after.attempt > before.attempt:
            continue
        if (after.status, after.attempt) == (before.status, before.attempt):
            continue
        assert isinstance(before, Prior)  # the row itself is always the last state
        reason = f" ({before.error})" if before.error else ""
        return (
            f"was {before.status}{reason}, attempt {before.attempt}, until "
            f"{before.replaced_at.isoformat()}; now {after.status}, attempt {after.attempt}"
        )
    return ""


def _line(job: Job, row: Record, verdict: str, detail: str) -> Line:
    if row.waited is not None:
        detail = f"{detail}; {row.waited}" if detail else row.waited
    return Line(
        job.tenant, job.name, row.slot, verdict, row.status, row.node, row.attempt, row.token,
        row.origin, detail,
    )  # fmt: skip
