"""Plans, the part of ``JobStore`` that says what applying job definitions would do before
anything is written (``pulse jobs apply --plan``): per job, the fields that change, its next
slots before and after (with their DST rules), and the catch-up the change sets off.

A plan runs ``Definitions.apply`` itself in a savepoint and rolls it back, so it reports
exactly what an apply would change, triggers and checks included, and writes nothing. Each
job's revision at plan time goes into the plan: an apply given them (``expect``) refuses a
plan that went stale. Why so: docs/design/revisions.md.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from datetime import datetime
from typing import Any

from cluster.jobs.models import NEVER_DUE, Job, JobStatus, iso
from cluster.jobs.spec import OPTIONS, JobSpec
from cluster.store.jobstore.definitions import Definitions
from cluster.store.jobstore.scoped import ScopedConnection
from cluster.store.jobstore.specs import checked, label_of
from cluster.store.jobstore.timeline import explain_job, outage_of
from cluster.timing.instants import US
from cluster.timing.schedule import CHAINED_NEXT
from cluster.timing.timeline import MAX_OUTAGE_SLOTS, Step, decisions

PLAN_SLOTS = 5  # next slots shown before and after a change


@dataclass
class JobPlan:
    tenant: str
    name: str
    action: str  # create | update | unchanged | remove
    revision: int  # the job's revision when planned; 0: no such job
    changes: dict[str, list[Any]] = field(default_factory=dict)  # field: [before, after]
    next_before: list[Step] = field(default_factory=list)
    next_after: list[Step] = field(default_factory=list)
    catch_up: list[Step] = field(default_factory=list)  # overdue slots after the change
    dropped: int = 0  # overdue slots of the old timing that will never run
    notes: list[str] = field(default_factory=list)
    # Dependencies: the edges ("a -> b (same)") the change adds and drops, and what the
    # job's slot then waits for (None: nothing; docs/design/gates.md).
    edges_added: list[str] = field(default_factory=list)
    edges_removed: list[str] = field(default_factory=list)
    waits_for: str | None = None

    @property
    def label(self) -> str:
        return label_of(self.tenant, self.name)

    def to_json(self) -> dict[str, Any]:
        return {
            "tenant": self.tenant,
            "name": self.name,
            "action": self.action,
            "revision": self.revision,
            "changes": self.changes,
            "next_before": [s.to_json() for s in self.next_before],
            "next_after": [s.to_json() for s in self.next_after],
            "catch_up": [s.to_json() for s in self.catch_up],
            "dropped": self.dropped,
            "notes": self.notes,
            "edges": {"added": self.edges_added, "removed": self.edges_removed},
            "waits_for": self.waits_for,
        }


@dataclass
class Plan:
    at: datetime
    digest: str  # of the definitions planned: an apply of other ones refuses the plan
    jobs: list[JobPlan]

    @property
    def changed(self) -> bool:
        return any(j.action != "unchanged" for j in self.jobs)

    def expected(self) -> dict[tuple[str, str], int]:
        return {(j.tenant, j.name): j.revision for j in self.jobs}

    def to_json(self) -> dict[str, Any]:
        return {"at": iso(self.at), "digest": self.digest, "jobs": [j.to_json() for j in self.jobs]}


def digest_of(specs: Sequence[JobSpec], prune: bool) -> str:
    """The sha256 of the definitions (and whether the apply prunes), canonical JSON."""
    data = {"prune": prune, "jobs": [asdict(s) for s in checked(specs)]}
    text = json.dumps(data, sort_keys=True, default=str, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()


class _Rollback(Exception):  # carries the plan out of the savepoint it rolls back
    def __init__(self, plan: Plan) -> None:
        self.plan = plan


class Plans:
    def __init__(self, db: ScopedConnection, definitions: Definitions) -> None:
        self._db = db
        self._definitions = definitions

    async def plan(
        self,
        specs: Sequence[JobSpec],
        *,
        prune: bool = False,
        now: datetime | None = None,
        slots: int = PLAN_SLOTS,
    ) -> Plan:
        """What ``apply(specs, prune=prune)`` would do now; nothing is written."""
        specs = checked(specs)
        digest = digest_of(specs, prune)
        try:
            async with self._db.transaction():
                db_now = await self._db.db_now(now)
                before = {(s.tenant, s.name): await self._job(s.tenant, s.name) for s in specs}
                children = {key: await self._children(job) for key, job in before.items()}
                result = await self._definitions.apply(specs, prune=prune, now=now)
                jobs = []
                for spec in specs:
                    key = (spec.tenant, spec.name)
                    old = before[key]
                    new = await self._job(spec.tenant, spec.name)
                    assert new is not None
                    moved = (children[key], await self._children(new))
                    jobs.append(await self._job_plan(old, new, db_now, slots, moved))
                for label in result.removed:
                    jobs.append(await self._removed(label, specs, db_now, slots))
                raise _Rollback(Plan(db_now, digest, jobs))
        except _Rollback as done:
            return done.plan

    async def _job(self, tenant: str, name: str) -> Job | None:
        row = await self._db.one("get_job", {"tenant_id": tenant, "name": name})
        return None if row is None else Job.from_row(row)

    async def _children(self, job: Job | None) -> dict[str, Job]:
        """An each-zone job's children by name (none for another job)."""
        if job is None or not job.each_zone:
            return {}
        rows = await self._db.all("lock_children", {"ids": [job.id]})
        return {row["name"]: Job.from_row(row) for row in rows}

    async def _job_plan(
        self,
        old: Job | None,
        new: Job,
        now: datetime,
        slots: int,
        children: tuple[dict[str, Job], dict[str, Job]],
    ) -> JobPlan:
        """``children``: an each-zone job's children before the apply and after it."""
        plan = JobPlan(new.tenant, new.name, "create", 0 if old is None else old.revision)
        if old is not None:
            plan.action = "update" if new.revision != old.revision else "unchanged"
            plan.next_before = _coming(old, now, slots)
        row = None
        if plan.action != "unchanged":
            row = await self._db.one(
                "job_revision",
                {"tenant_id": new.tenant, "name": new.name, "revision": new.revision},
            )
            assert row is not None
            plan.changes = row["diff"]
            if old is None:  # a create: what the definition sets, in the options' order
                diff = plan.changes
                plan.changes = {
                    d.name: diff[d.name]
                    for d in OPTIONS
                    if d.name in diff and OPTIONS.set_apart(d.name, diff[d.name][1])
                }
        plan.next_after = _coming(new, now, slots)
        if new.status == JobStatus.IDLE and new.next_run_at is not None and new.next_run_at <= now:
            plan.catch_up = outage_of(new, new.slot_at - US, now)
        if old is not None and plan.action == "update":
            plan.dropped, plan.notes = _dropped(old, new, now, children)
        if row is not None:  # its edges: which appear or go, and what it then waits for
            plan.edges_added, plan.edges_removed = edges_changed(new.name, row)
            if plan.edges_added or plan.edges_removed:
                plan.waits_for = await self._waits_for(new)
                plan.notes.append(_waits_note(new, row["definition"], plan.waits_for))
        return plan

    async def _removed(
        self, label: str, specs: Sequence[JobSpec], now: datetime, slots: int
    ) -> JobPlan:
        tenant, _, name = label.rpartition("/")
        tenant = tenant or "default"
        (row,) = await self._db.all(
            "job_revisions", {"tenant_id": tenant, "name": name, "before": None, "limit": 1}
        )
        plan = JobPlan(tenant, name, "remove", row["revision"] - 1, changes=row["diff"])
        plan.edges_added, plan.edges_removed = edges_changed(name, row)
        plan.notes.append("removed with its run history (--prune: not in the definitions)")
        return plan

    async def _waits_for(self, job: Job) -> str | None:
        """What the job's slot waits for once applied, as ``pulse jobs show`` says it."""
        gate = await self._db.one("gate_waits_for", {"id": job.id})
        verdict = None if gate is None else gate["verdict"]
        return None if verdict is None else str(verdict).split(": ", 1)[1]


def edges_changed(name: str, revision: dict[str, Any]) -> tuple[list[str], list[str]]:
    """The edges (``upstream -> name (match)``) a revision adds and drops, from its diff
    (``after``, ``after_match``; a created or removed job's has every field) and, for the
    part that did not change, its definition (migration `0.2.0_pre_gates_bounded_waits`)."""
    definition, diff = revision["definition"], revision["diff"]
    if "after" not in diff and "after_match" not in diff:
        return [], []

    def edges(ups: list[str] | None, match: str | None) -> list[str]:
        return [f"{up} -> {name} ({match})" for up in ups or ()]

    before_ups, after_ups = diff.get("after", [definition.get("after")] * 2)
    before_match, after_match = diff.get("after_match", [definition.get("after_match")] * 2)
    before, after = edges(before_ups, before_match), edges(after_ups, after_match)
    return [e for e in after if e not in before], [e for e in before if e not in after]


def _waits_note(job: Job, definition: dict[str, Any], waits_for: str | None) -> str:
    ups = definition.get("after") or []
    if not ups:
        return "waits for no other job any more"
    named = f"waits for {', '.join(ups)} ({definition.get('after_match')})"
    if job.status != JobStatus.IDLE or job.slot_at >= CHAINED_NEXT:
        return f"{named}: no slot waiting now"
    if waits_for is None:
        return f"{named}: its slot {iso(job.slot_at)} then waits for nothing"
    return f"{named}: its slot {iso(job.slot_at)} then waits: {waits_for}"


def _coming(job: Job, now: datetime, slots: int) -> list[Step]:
    if job.status in NEVER_DUE or job.each_zone:
        return []
    return explain_job(job, now, slots)


def _dropped(
    old: Job, new: Job, now: datetime, children: tuple[dict[str, Job], dict[str, Job]]
) -> tuple[int, list[str]]:
    """Overdue slots of the old timing that the move to the new one leaves unrun: the job's
    own, or an each-zone job's children's (it never runs itself)."""
    notes = []
    if new.status == JobStatus.DONE and old.status != JobStatus.DONE:
        count = _due(old, now) if old.status == JobStatus.IDLE else 0
        owed = f"; {count} overdue slot(s) since {iso(old.slot_at)} are recorded skipped"
        notes.append(
            f"done: its {new.runs_done} run(s) reach max_runs {new.max_runs}, no slot runs "
            f"again{owed if count else ''}"
        )
        return count, notes
    if old.status == JobStatus.DONE and new.status != JobStatus.DONE:
        notes.append(f"runs again from {iso(new.slot_at)}: the slots while it was done do not run")
    if old.paused and not new.paused:
        notes.append("resumed: continues at its next slot; slots missed while paused do not run")
    if new.paused and not old.paused:
        notes.append("paused: no slot runs until it is resumed (a running one finishes)")
    if old.each_zone:
        before, after = children
        count = sum(_overdue(child, after[name], now) for name, child in before.items()
                    if name in after)  # fmt: skip
        if count:
            notes.append(
                f"{count} overdue slot(s) of the old timing in its zones' children will not "
                "run: each moves to the new timing's next slot, and they are recorded skipped"
            )
        return count, notes
    count = _overdue(old, new, now)
    if count and new.each_zone:
        notes.append(
            f"{count} overdue slot(s) since {iso(old.slot_at)} will not run: an each-zone job "
            "runs its slots through its zones' children, and they are recorded skipped"
        )
    elif count:
        notes.append(
            f"{count} overdue slot(s) of the old timing since {iso(old.slot_at)} will not run: "
            "the job moves to the new timing's next slot, and they are recorded skipped"
        )
    return count, notes


def _overdue(old: Job, new: Job, now: datetime) -> int:
    """How many of the old timing's slots due by ``now`` the job's move leaves unrun (made
    an each-zone job, it runs none of them itself)."""
    if old.status != JobStatus.IDLE or old.next_run_at is None or old.slot_at > now:
        return 0
    if new.slot_at == old.slot_at and not new.each_zone:
        return 0
    return _due(old, now)


def _due(job: Job, now: datetime) -> int:
    """How many of the job's slots from its own are due by ``now`` (its calendar's runs)."""
    count = 0
    for decision in decisions(job.walked_schedule(), job.rule(), job.slot_at - US):
        if decision.slot > now or count >= MAX_OUTAGE_SLOTS:
            break
        count += decision.runs
    return count
