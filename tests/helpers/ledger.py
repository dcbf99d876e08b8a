"""The slot ledger (L1 in DESIGN.md) checked from a cluster's rows, for the model-based test
of operator actions (tests/integration/test_ledger_model.py).

The test keeps what it did to each job as a ``Timeline``: which schedule held from when,
when the job was quiet (paused, paused until a time), and when it was done. From it the
checker derives the slots the job should have had, and finds in the rows:

- a slot with no record: every expected slot before the one the job waits at has a run row
  (run, failed, skipped...), and a chained job has a record, a queued slot or its current
  slot for each success of its upstream since it was made;
- a slot its timing made run while the job was paused (or paused until a time), or after
  it was done (its ``max_runs`` reached);
- a skipped record without a reason, or with a gate's reason that is not true of the
  upstream's slot when the record is first seen, or a watched slot an operator's action
  recorded skipped once it was past its ``late_after`` (its ping was missed);
- a terminal record overwritten: a run row that ended keeps its status once its slot's time
  has come, unless its slot waits for a retry or an operator asked for the slot again (a
  backfill or ``trigger --slot`` over it: one rewrite by a run of origin ``backfill`` or
  ``rerun`` per ask), and is not deleted while its job lives;
- a wait without a bound: after a node's pass, no job that could run is left due (one
  whose slot waits for a named limit or a place of its tenant, which runs outliving the
  pass fill, cannot run), none waits at a marker date but a chained job with nothing
  queued, no flight is left queued past its due time with nothing running before it, no
  watched run is ``running`` past its timeout, and no wait for a named limit is open once
  its slot waits no more.

It reads Pulse's own rows, as ``pulse audit`` will; the audit can take its place.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from cluster.timing.instants import US
from cluster.timing.schedule import Schedule

MARKER = datetime.fromisoformat("9998-01-01T00:00:00+00:00")  # and 9999-01-01: no slot
TERMINAL_AGAIN = ("rerun", "backfill")  # origins of a slot an operator asked to run again
SCHEDULED = (None, "catch-up", "window", "calendar")  # origins of a run its timing made
MAX_SLOTS = 10_000


@dataclass
class Timeline:
    """One job as the operator shaped it: its schedules over time and its quiet spells."""

    created: datetime
    schedules: list[tuple[datetime, Schedule]] = field(default_factory=list)  # from then on
    quiet: list[list[datetime | None]] = field(default_factory=list)  # [from, to); to None: open
    upstreams: tuple[str, ...] = ()  # a chained job's (``@after:``)
    done: list[list[datetime | None]] = field(default_factory=list)  # past its max_runs

    def quiet_at(self, slot: datetime) -> bool:
        return _within(self.quiet, slot)

    def done_at(self, slot: datetime) -> bool:
        return _within(self.done, slot)

    def expected(self, until: datetime) -> list[datetime]:
        """The slots after its creation up to ``until`` it should have had."""
        found: list[datetime] = []
        for i, (start, schedule) in enumerate(self.schedules):
            end = self.schedules[i + 1][0] if i + 1 < len(self.schedules) else until
            end = min(end, until)
            if end > start:
                found += schedule.slots_between(start + US, end, MAX_SLOTS)
        return [s for s in found if not self.quiet_at(s) and not self.done_at(s)]


def _within(spans: list[list[datetime | None]], slot: datetime) -> bool:
    return any(
        start is not None and start <= slot and (end is None or slot < end) for start, end in spans
    )


@dataclass
class Ledger:
    """The terminal records seen so far, to find one overwritten."""

    terminal: dict[tuple[Any, datetime], str] = field(default_factory=dict)  # their status
    asked: Counter[tuple[Any, datetime]] = field(default_factory=Counter)  # rewrites allowed

    def forget(self, job_id: Any) -> None:
        """The job was removed: its history went with it."""
        self.terminal = {k: v for k, v in self.terminal.items() if k[0] != job_id}
        self.asked = Counter({k: v for k, v in self.asked.items() if k[0] != job_id})

    def ask(self, job_id: Any, slots: Iterable[datetime]) -> None:
        """An operator asked for these slots again (a backfill, ``trigger --slot``): each
        may rewrite its record once, by a run of that origin."""
        self.asked.update((job_id, slot) for slot in slots)

    def check(
        self,
        jobs: Mapping[str, Mapping[str, Any]],
        runs: Iterable[Mapping[str, Any]],
        queued: Iterable[Mapping[str, Any]],
        timelines: Mapping[str, Timeline],
        clock: datetime,
        *,
        settle: timedelta = timedelta(0),
        flights: Iterable[Mapping[str, Any]] = (),
        running: Collection[str] = (),
        waiting_for_room: Collection[str] = (),
    ) -> list[str]:
        """What breaks the ledger in these rows (of one tenant): jobs by name, their runs,
        their ``chain_slots``; the model's timelines; the clock after a node's pass; their
        ``flights`` (a triggered slot's retry waits there, an every-node slot runs there
        until it is recorded: its members' runs); the jobs whose run is meant
        to outlive the pass (``running``), and those whose due slot waits for room (a named
        limit, or their tenant's places) that such runs fill (``waiting_for_room``)."""
        found: list[str] = []
        by_job: dict[Any, dict[datetime, Mapping[str, Any]]] = {}
        for run in runs:
            by_job.setdefault(run["job_id"], {})[run["scheduled_for"]] = run
        waiting = {(q["job_id"], q["slot"]) for q in queued if not q["taken"]}
        retrying = {(j["id"], j["slot_at"]) for j in jobs.values() if j["attempt"] > 1}
        retrying |= {(f["job_id"], f["slot"]) for f in flights if f["attempt"] > 1}
        in_flight = {(f["job_id"], f["slot"]) for f in flights}
        seen = set(self.terminal)  # the records of earlier checks
        found += self._overwritten(by_job, {j["id"] for j in jobs.values()}, retrying, clock)
        for name, line in timelines.items():
            job = jobs.get(name)
            if job is None:
                found.append(f"{name}: the model has it, the database does not")
                continue
            mine = by_job.get(job["id"], {})
            for slot, run in sorted(mine.items()):
                ran = run["status"] != "skipped"
                if ran and run["origin"] in SCHEDULED and line.quiet_at(slot):
                    found.append(f"{name}: slot {slot.isoformat()} ran while the job was quiet")
                # A chained job's slot is its upstream's (a backfill's may be old): when it
                # ran is what its done spells (kept by time, from the pass that made it done,
                # whose runs came first) are read against.
                when = run["started_at"] - US if line.upstreams and run["started_at"] else slot
                if ran and run["origin"] in SCHEDULED and line.done_at(when):
                    found.append(f"{name}: slot {slot.isoformat()} ran after the job was done")
                if run["status"] == "skipped" and not run["last_error"]:
                    found.append(f"{name}: slot {slot.isoformat()} skipped without a reason")
                elif run["status"] == "skipped" and (job["id"], slot) not in seen:
                    found += _untrue(name, slot, run["last_error"], jobs, by_job)
                    found += _missed_ping(name, job, slot, run)
            if line.upstreams:
                found += _chained(name, job, line, mine, jobs, by_job, waiting)
            else:
                pending = min(job["slot_at"], clock - settle)
                for slot in line.expected(pending - US):
                    if slot not in mine and (job["id"], slot) not in in_flight:
                        found.append(f"{name}: slot {slot.isoformat()} has no record")
            found += _waits(
                name, job, mine, waiting, clock, name in running, name in waiting_for_room
            )
        return found

    def _overwritten(
        self,
        by_job: Mapping[Any, Mapping[datetime, Mapping[str, Any]]],
        live: set[Any],
        retrying: set[tuple[Any, datetime]],
        clock: datetime,
    ) -> list[str]:
        """Terminal records gone or changed since the last check. A failed attempt whose
        slot waits for its retry is not terminal yet: the retry writes the slot's record;
        nor is a record of a slot still to come (a calendar's or window's skip written ahead,
        which a change of either takes back)."""
        found = []
        for (job_id, slot), status in list(self.terminal.items()):
            run = by_job.get(job_id, {}).get(slot)
            if (job_id, slot) in retrying:  # asked again, and between attempts
                continue
            if run is None and job_id in live:
                found.append(f"the record of {slot.isoformat()} ({status}) is gone")
            elif run is not None and run["status"] != status:
                if run["origin"] in TERMINAL_AGAIN and self.asked[(job_id, slot)] > 0:
                    if run["status"] != "running":  # the ask is spent once the run ends
                        self.asked[(job_id, slot)] -= 1
                    continue
                found.append(
                    f"{run['job_name']}: the {status} record of {slot.isoformat()} was "
                    f"overwritten: now {run['status']} ({run['origin']})"
                )
        for job_id, mine in by_job.items():
            for slot, run in mine.items():
                if run["status"] != "running" and (job_id, slot) not in retrying and slot <= clock:
                    self.terminal[(job_id, slot)] = run["status"]
        return found


# A gate's skip names what it saw of the upstream's slot (gate_verdict).
GATE_SKIP = re.compile(
    r"upstream (?P<up>\S+)'s slot (?P<slot>\S+) "
    r"(?P<saw>failed|timed out|was cancelled|was lost|was skipped)"
)
SAW = {
    "failed": "failed",
    "timed out": "timed_out",
    "was cancelled": "cancelled",
    "was lost": "lost",
    "was skipped": "skipped",
}


def _untrue(
    name: str,
    slot: datetime,
    reason: str,
    jobs: Mapping[str, Mapping[str, Any]],
    by_job: Mapping[Any, Mapping[datetime, Mapping[str, Any]]],
) -> list[str]:
    """A new gate skip whose reason says what the upstream's slot is not: the reason must
    be true when the record is written (a failed attempt whose retry waits is no failure).
    An operator's re-run of the upstream's slot in the same pass (a backfill) may have
    rewritten it since: its history then holds what the gate saw."""
    said = GATE_SKIP.match(reason)
    if said is None or said["up"] not in jobs:
        return []
    up_slot = datetime.fromisoformat(said["slot"].replace("Z", "+00:00"))
    record = by_job.get(jobs[said["up"]]["id"], {}).get(up_slot)
    status = None if record is None else record["status"]
    if status == SAW[said["saw"]]:
        return []
    if record is not None and record["origin"] in TERMINAL_AGAIN:
        history = [p.get("status") for p in record["history"] or ()]
        if SAW[said["saw"]] in history:
            return []
    return [f"{name}: slot {slot.isoformat()} skipped as '{reason}', but that slot is {status}"]


def _missed_ping(
    name: str, job: Mapping[str, Any], slot: datetime, run: Mapping[str, Any]
) -> list[str]:
    """A watched slot (before its job's adoption) past its ``late_after`` when an
    operator's action recorded it skipped: no ping came for it in time, so its true record
    is a missed one, which the action declares first. (The model's watch job has no window
    or calendar: each slot starts on time.)"""
    adopt_at = job.get("adopt_at")
    watched = job.get("watch") or adopt_at is not None
    adopted = adopt_at is not None and slot >= adopt_at
    if not watched or adopted or not run["last_error"].startswith("skipped by pulse jobs"):
        return []
    if run["finished_at"] <= slot + timedelta(seconds=job["late_after_s"]):
        return []
    return [f"{name}: slot {slot.isoformat()} was late when '{run['last_error']}' recorded it"]


def _chained(
    name: str,
    job: Mapping[str, Any],
    line: Timeline,
    mine: Mapping[datetime, Mapping[str, Any]],
    jobs: Mapping[str, Mapping[str, Any]],
    by_job: Mapping[Any, Mapping[datetime, Mapping[str, Any]]],
    waiting: set[tuple[Any, datetime]],
) -> list[str]:
    """Each success of an upstream since the chained job was made is one of its slots, but
    one while it was done (``Timeline.done``: from the pass or the apply that made it so)."""
    found = []
    for upstream in line.upstreams:
        up = jobs.get(upstream)
        for slot, run in sorted(by_job.get(up["id"], {}).items() if up else ()):
            if run["status"] != "succeeded" or run["finished_at"] <= line.created:
                continue
            if line.done_at(run["finished_at"]):
                continue
            if slot in mine or (job["id"], slot) in waiting or job["slot_at"] == slot:
                continue
            found.append(f"{name}: {upstream}'s success of {slot.isoformat()} made no slot")
    return found


def _waits(
    name: str,
    job: Mapping[str, Any],
    mine: Mapping[datetime, Mapping[str, Any]],
    waiting: set[tuple[Any, datetime]],
    clock: datetime,
    long_run: bool = False,
    no_room: bool = False,
) -> list[str]:
    """No slot waits without a bound once a node's pass is over (but a ``long_run``, and a
    slot that waits for room such runs fill: ``no_room``)."""
    found = []
    due = job["next_run_at"]
    if job["status"] == "idle":
        chained_idle = job["schedule"].startswith("@after:") and not any(
            j == job["id"] for j, _ in waiting
        )
        if due >= MARKER and not chained_idle:
            found.append(f"{name}: waits at {due.isoformat()} (no bound)")
        elif due <= clock and not job["watch"] and not no_room:
            found.append(f"{name}: due at {due.isoformat()}, left unclaimed by the pass")
    if job["status"] == "running" and not long_run:
        found.append(f"{name}: still running after the pass")
    for slot, run in mine.items():
        if run["status"] == "running":
            bound = run["started_at"] + timedelta(seconds=job["timeout_s"])
            if run["origin"] != "ping" or bound < clock:  # a watched run, adopted since too
                found.append(f"{name}: run of {slot.isoformat()} running past {bound.isoformat()}")
    return found


def open_waits(
    waits: Iterable[Mapping[str, Any]],
    jobs: Mapping[str, Mapping[str, Any]],
    flights: Iterable[Mapping[str, Any]],
) -> list[str]:
    """A wait for a named limit (``limit_waits``, open: ``ended`` NULL) is of a slot that
    waits still: the job's own, idle at it, or a queued flight's. One left open after its
    slot stopped waiting (skipped, paused, moved on, run without the key) is listed as a
    waiter for ever, and kept by no pruning."""
    queued = {(f["job_id"], f["slot"]) for f in flights if f["status"] == "queued"}
    found = []
    for wait in waits:
        job = jobs[wait["name"]]
        if job["status"] == "idle" and job["slot_at"] == wait["slot"]:
            continue
        if (job["id"], wait["slot"]) not in queued:
            found.append(
                f"{wait['name']}: its wait for key {wait['key_name']} at "
                f"{wait['slot'].isoformat()} is open, the slot waits no more"
            )
    return found


def left_queued(
    flights: Iterable[Mapping[str, Any]],
    jobs: Mapping[str, Mapping[str, Any]],
    no_room: Collection[str],
    clock: datetime,
) -> list[str]:
    """After a node's pass no flight (or each-node run) is left queued past its due time,
    but one whose job has a run going (a flight of a job waits while its slot runs, an
    ``allow`` job's beyond its limit of flights, an each-node job's behind the member's run)
    or that waits for room (``no_room``: a key's, its tenant's)."""
    names = {job["id"]: name for name, job in jobs.items()}
    going = {f["job_id"] for f in flights if f["status"] == "running"}
    going |= {job["id"] for job in jobs.values() if job["status"] == "running"}
    return [
        f"{names[f['job_id']]}: its queued slot {f['slot'].isoformat()} was due at "
        f"{f['due_at'].isoformat()}, left unclaimed by the pass"
        for f in flights
        if f["status"] == "queued"
        and f["due_at"] <= clock
        and f["job_id"] not in going
        and names[f["job_id"]] not in no_room
    ]


def unexpected(found: Sequence[str]) -> str:
    """The violations, one a line, for an assertion's message."""
    return "\n".join(found)
