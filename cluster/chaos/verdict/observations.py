"""What a chaos run observed, as plain data: the checker's only input (no I/O here).

Times are float seconds since the epoch on the harness's clock (database times are
shifted by the measured offset); slots are integer milliseconds since the epoch in database
time, so they compare exactly (``slot_time`` turns one into harness time). Witness lines
(read by ``cluster.chaos.witness``) and node log lines are turned into this shape here.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from datetime import datetime
from typing import Protocol


def to_ms(moment: datetime | float) -> int:
    seconds = moment.timestamp() if isinstance(moment, datetime) else moment
    return round(seconds * 1000)


@dataclass(frozen=True)
class JobInfo:
    name: str
    interval_s: int
    catch_up: str
    sleep_s: float
    shard: int
    kind: str = "witness"  # which checks beyond the common ones apply (workload.HANDLERS)
    max_concurrent: int = 1  # slots run side by side (overlap allow, kind ``allow``)
    zones: tuple[str, ...] = ()  # pinned to these zones (kind ``pinned``); empty: any
    after: tuple[str, ...] = ()  # upstream jobs (kind ``dependent``)
    chained: bool = False  # an @after: job: its slots are its upstreams' successes
    uses: tuple[str, ...] = ()  # named limits (kind ``keyed``)
    grace_s: float = 60.0  # how late a slot may start before catch-up ``skip`` skips it


class WitnessLine(Protocol):
    """One line of the witness file as ``cluster.chaos.witness`` reads it."""

    @property
    def job(self) -> str: ...
    @property
    def slot(self) -> datetime: ...
    @property
    def attempt(self) -> int: ...
    @property
    def node(self) -> str: ...
    @property
    def at(self) -> float: ...


@dataclass(frozen=True)
class Execution:
    """A witnessed handler start for (job, slot, attempt) on a node."""

    job: str
    slot_ms: int
    attempt: int
    node: str
    at: float

    @classmethod
    def witnessed(cls, line: WitnessLine) -> Execution:
        return cls(line.job, to_ms(line.slot), line.attempt, line.node, line.at)


@dataclass(frozen=True)
class RunRecord:
    """The final row of one slot in the runs table."""

    job: str
    slot_ms: int
    attempt: int
    node: str | None
    status: str
    finished_at: float | None
    token: int | None = None  # the lease (fencing) token of the slot's last write
    started_at: float | None = None  # when its last attempt began (the database's record)
    reason: str | None = None  # why a skipped slot was skipped (its last_error)


@dataclass(frozen=True)
class AuditFinding:
    """A line of ``pulse audit`` over the window that is not a plain run or skip: a slot
    missing, overwritten or run more than once (with why), or one not decided yet."""

    job: str
    slot_ms: int
    verdict: str  # one of cluster.jobs.ledger.VERDICTS
    detail: str


@dataclass(frozen=True)
class LedgerRow:
    """A row an effect job's run committed through ``ctx.transaction()``."""

    job: str
    slot_ms: int
    attempt: int
    token: int
    node: str


@dataclass(frozen=True)
class LockSample:
    """Shard -> holder (node id) at one moment; None when Postgres did not answer."""

    at: float
    holders: Mapping[int, str] | None


@dataclass(frozen=True)
class FaultRecord:
    """One injected fault as it actually happened."""

    kind: str
    label: str
    targets: tuple[str, ...]
    started: float
    ended: float
    bound_s: float
    detail: str = ""
    # A failover's measured figure: the promotion time (pg-failover), or how long until
    # every node heartbeated on the new primary (redis-failover).
    measured_s: float | None = None

    @property
    def global_(self) -> bool:
        """A server fault touches every node."""
        return not self.targets


@dataclass(frozen=True)
class Observations:
    jobs: Mapping[str, JobInfo]
    runs: Sequence[RunRecord]
    executions: Sequence[Execution]
    samples: Sequence[LockSample]
    faults: Sequence[FaultRecord]
    shards: int
    window_start: float  # slots in [window_start, window_end] must all be accounted for
    window_end: float
    phase_start: float  # faults begin; coverage is judged from here
    phase_end: float
    kill_bound_s: float
    clock_offset_s: float = 0.0  # database clock minus harness clock; slots are in DB time
    log_events: Mapping[str, int] = field(default_factory=dict)
    node_exits: Sequence[str] = ()
    # The poison job (not in ``jobs``: its slots are meant to fail) and its retries.
    poison_job: str | None = None
    poison_retries: int = 0
    ledger: Sequence[LedgerRow] = ()  # the effect jobs' committed rows
    # Postgres replicated asynchronously (``--pg-async``): a failover may lose the last
    # claims and completions committed on the old primary.
    async_replication: bool = False
    node_zones: Mapping[str, str] = field(default_factory=dict)  # node id -> its zone
    # `pulse audit` over the window: lines per verdict, and every line that is not a plain
    # run or skip (empty counts: not audited).
    audit_counts: Mapping[str, int] = field(default_factory=dict)
    audit_findings: Sequence[AuditFinding] = ()
    keys: Mapping[str, int] = field(default_factory=dict)  # named limit -> runs at once

    def slot_time(self, slot_ms: int) -> float:
        """A slot on the harness's clock."""
        return slot_ms / 1000 - self.clock_offset_s


def count_log_events(lines: Iterable[str], counter: Counter[str] | None = None) -> Counter[str]:
    """Counts the ``event`` of JSON log lines (others are ignored)."""
    counter = Counter() if counter is None else counter
    for line in lines:
        if not line.startswith("{"):
            continue
        try:
            event = json.loads(line).get("event")
        except json.JSONDecodeError:
            continue
        if isinstance(event, str):
            counter[event] += 1
    return counter


def to_json(obs: Observations) -> str:
    """What the checker saw as JSON, kept next to the logs for a post-mortem of a failed run."""
    data = asdict(replace(obs, log_events={}))
    data["log_events"] = dict(obs.log_events)
    return json.dumps(data)


def from_json(text: str) -> Observations:
    """The inverse of ``to_json``: re-check a finished run offline."""
    data = json.loads(text)
    return Observations(
        jobs={
            k: JobInfo(
                **{
                    **v,
                    "zones": tuple(v.get("zones", ())),
                    "after": tuple(v.get("after", ())),
                    "uses": tuple(v.get("uses", ())),
                }
            )
            for k, v in data.pop("jobs").items()
        },
        runs=[RunRecord(**r) for r in data.pop("runs")],
        executions=[Execution(**e) for e in data.pop("executions")],
        samples=[
            LockSample(
                s["at"],
                None if s["holders"] is None else {int(k): v for k, v in s["holders"].items()},
            )
            for s in data.pop("samples")
        ],
        faults=[FaultRecord(**{**f, "targets": tuple(f["targets"])}) for f in data.pop("faults")],
        node_exits=tuple(data.pop("node_exits")),
        ledger=tuple(LedgerRow(**r) for r in data.pop("ledger", [])),
        audit_findings=tuple(AuditFinding(**f) for f in data.pop("audit_findings", [])),
        **data,
    )
