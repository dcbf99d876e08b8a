"""The slots a new definition moves a job past. ``pulse jobs apply`` (or ``rollback``, an
apply of an older revision) that changes the timing of a job whose slot is overdue (no node
ran it: an outage) moves the job to the new timing's next slot: the old timing's slots due
by then never run. They are recorded skipped, with that reason, in the apply's transaction,
as a pause or a window change records the slots it passes (the slot ledger,
docs/guarantees.md; docs/design/gates.md): from the rows the batch's upsert returns, or,
for a login that writes no past runs, before the upsert moves the jobs. A part of
``Definitions``.

A slot held at its gate or deferred by a window is kept by the new definition instead
(``Definitions._past_records``), and its claim decides it and the new timing's slots up to
then; the old timing's slots after it that the new timing does not have are recorded here.
A job whose definition changes but not its timing keeps its slot: nothing is recorded.

A pause walks the same way (``passed_slots``): the slots an idle job owes when it is paused
(due, held at its gate, deferred) are recorded skipped before it stops.
"""

from __future__ import annotations

import itertools
import json
from collections import deque
from collections.abc import Iterator, Mapping, Sequence
from datetime import datetime
from typing import Any

from psycopg.types.json import Jsonb

from cluster.jobs.models import Job, JobStatus
from cluster.store.connect import Row
from cluster.store.jobstore import bulk
from cluster.store.jobstore.scoped import ScopedConnection
from cluster.timing.calendared import Decision
from cluster.timing.instants import US
from cluster.timing.timeline import MAX_OUTAGE_SLOTS, decisions

__all__ = [
    "MAX_RECORDED",
    "dropped_slots",
    "overdue",
    "owed",
    "passed_slots",
    "record_ahead",
    "record_moved",
    "skips_json",
]

MAX_RECORDED = 1000  # the newest overdue slots recorded; older ones are counted in a note


def owed(
    params: Mapping[bulk.Key, Any], found: Mapping[bulk.Key, Row], now: datetime
) -> list[bulk.Key]:
    """The keys of a batch's existing jobs (``found``: their rows before the apply) whose
    slot is overdue: those a new timing may move past slots to record."""
    return [key for key in params if key in found and overdue(found[key], now)]


async def record_moved(
    db: ScopedConnection,
    keys: Sequence[bulk.Key],
    found: Mapping[bulk.Key, Row],
    written: Mapping[bulk.Key, Row],
    now: datetime,
    by: str,
) -> None:
    """Record skipped the overdue slots that the jobs of ``keys`` (``owed``) pass from
    their row before (``found``) to the one ``upsert_jobs`` wrote (``written``; a job it
    left as it was keeps its slot and passes nothing): ``dropped_slots``, in one statement
    for the batch."""
    records = []
    for key in keys:
        if key not in written:
            continue
        old, new = Job.from_row(found[key]), Job.from_row(written[key])
        skips = dropped_slots(old, new, now, by)
        if skips:
            records.append({"id": str(old.id), "skips": json.loads(skips_json(skips))})
    if records:
        await db.all("record_skips_each", {"jobs": Jsonb(records), "now": now})


async def record_ahead(
    db: ScopedConnection,
    keys: Sequence[bulk.Key],
    params: Mapping[bulk.Key, Mapping[str, Any]],
    found: Mapping[bulk.Key, Row],
    now: datetime,
    by: str,
) -> bool:
    """For a login that writes no past runs (the web's: ``record_skipped`` records for it
    only slots at or after the job's own), ``record_moved`` before the upsert moves the
    jobs of ``keys``, asking where it puts each of the upsert itself, run in a savepoint
    rolled back (``bulk.probe``); whether it did. Any other login records after the upsert,
    from the rows it returns (``record_moved``): one upsert a batch."""
    if not keys or await db.writes_runs():
        return False
    probed = await bulk.probe(db, [params[key] for key in keys])
    await record_moved(db, keys, found, probed, now, by)
    return True


def overdue(job: Mapping[str, Any], now: datetime) -> bool:
    """Whether the existing job's row (``get_job``) holds a slot due by ``now`` that a new
    timing would move it past: idle on its schedule, its slot's time come. A running job
    keeps its slot; a paused one owes nothing (its pause recorded what it passed)."""
    return bool(
        job["status"] == JobStatus.IDLE
        and not job["paused"]
        and not job["each_zone"]
        and not job["watch"]
        and job["slot_at"] <= now
        and not str(job["schedule"]).startswith("@after:")
    )


# A slot to record skipped, why, and the time its record stands for unlisted slots from.
Dropped = tuple[datetime, str, datetime | None]


def dropped_slots(old: Job, new: Job, now: datetime, by: str) -> list[Dropped]:
    """The slots of the job's old timing (``old``, its row before the apply) due by ``now``
    that its new row (``new``) leaves without a record, each with why it is recorded
    skipped: ``by`` moved the job past it, or the old calendar or a window skips it.

    A job moved to its new timing's next slot passes every one from its old slot on. One
    that keeps its slot (held at its gate, deferred by a window) has its claim decide the
    slots of the new timing up to then, by catch-up; it passes only the old timing's slots
    after its own that the new timing does not have. At most the newest ``MAX_RECORDED``;
    the oldest listed names how many older ones were passed too and stands for them from
    the first one passed (``runs.skipped_from``, as catch-up does). An outage of more than
    ``MAX_OUTAGE_SLOTS`` is not walked whole: its newest slots are found from the clock
    back (``_tail_from``), and the count of the older ones is a lower bound."""
    reason = f"skipped by {by}: a new timing moved the job past it before it ran"
    return _passed(old, now, reason, new if new.slot_at == old.slot_at else None)


def passed_slots(job: Job, now: datetime, reason: str) -> list[Dropped]:
    """Every slot of the job due by ``now`` from its own slot on, each with ``reason`` (or
    the rule's, for a slot its calendar or a window skips): those a pause moves it past.
    At most the newest ``MAX_RECORDED``, the oldest listed standing for the others, as
    ``dropped_slots`` lists them."""
    return _passed(job, now, reason, None)


def _passed(old: Job, now: datetime, reason: str, keeper: Job | None) -> list[Dropped]:
    """The walk of ``dropped_slots`` and ``passed_slots``: ``keeper``, the job's new row
    when it keeps its slot (its claim decides the new timing's slots up to then)."""
    kept = keeper is not None
    decided = _slots(keeper, old.slot_at, now) if keeper is not None else set()
    found: deque[Dropped] = deque(maxlen=MAX_RECORDED)
    passed, first = 0, None

    def pass_by(slot: datetime, why: str) -> None:
        nonlocal passed, first
        if slot not in decided and not (kept and slot <= old.slot_at):
            found.append((slot, why, None))
            passed += 1
            first = first or slot

    after, exact = old.slot_at - US, True
    while True:
        walked = 0
        for decision in _decisions(old, after, now):
            if walked == 0 and after < old.slot_at and decision.slot != old.slot_at and not kept:
                # Its slot is no slot of the schedule (a trigger's instant): passed all the same.
                pass_by(old.slot_at, reason)
            pass_by(decision.slot, reason if decision.runs else _rule_reason(decision.reason))
            walked, last = walked + 1, decision.slot
        if walked < MAX_OUTAGE_SLOTS:
            break
        after = _tail_from(old, after, last, now)  # the slots between are neither walked nor listed
        exact = exact and after == last
        decided |= _slots(keeper, after, now) if keeper is not None else set()
    listed = list(found)
    if passed > len(listed):
        slot, why, _ = listed[0]
        assert first is not None
        older = passed - len(listed)
        count = f"{older}" if exact else f"more than {older}"
        note = f"{count} older slots, from {first.isoformat()}, were skipped too and are not listed"
        listed[0] = (slot, f"{why}; {note}", first)
    return listed


def _decisions(job: Job, after: datetime, now: datetime) -> Iterator[Decision]:
    """The job's decisions after ``after``, up to ``now`` and at most ``MAX_OUTAGE_SLOTS``
    (one for a one-off)."""
    schedule = job.parsed_schedule()
    for count, decision in enumerate(decisions(schedule, job.rule(), after)):
        if decision.slot > now or count >= MAX_OUTAGE_SLOTS:
            return
        yield decision
        if schedule.at is not None:
            return


def _tail_from(job: Job, start: datetime, walked: datetime, now: datetime) -> datetime:
    """Where to walk the newest slots of an outage from, past the ``MAX_OUTAGE_SLOTS``
    walked from ``start`` to ``walked``: an instant with at least ``MAX_RECORDED`` of the
    job's slots between it and ``now`` (or ``walked`` itself), found by doubling a stretch
    back from ``now`` that starts at twice the walked slots' mean spacing times
    ``MAX_RECORDED``."""
    spacing = max((walked - start) / MAX_OUTAGE_SLOTS, US)
    stretch = spacing * MAX_RECORDED * 2
    while now - stretch > walked:
        after = now - stretch
        newest = itertools.islice(_decisions(job, after, now), MAX_RECORDED)
        if sum(1 for _ in newest) >= MAX_RECORDED:
            return after
        stretch *= 2
    return walked


def _slots(job: Job, after: datetime, now: datetime) -> set[datetime]:
    """The slots of the job's timing in ``(after, now]``, run or skipped by its rule."""
    return {decision.slot for decision in _decisions(job, after, now)}


def _rule_reason(reason: str | None) -> str:
    return reason or "skipped by the calendar"


def skips_json(skips: Sequence[Dropped]) -> str:
    """The list of ``[slot, reason]`` or ``[slot, reason, skipped_from]`` ``record_skips``
    takes."""
    return json.dumps(
        [[slot.isoformat(), why] + ([] if since is None else [since.isoformat()])
         for slot, why, since in skips]
    )  # fmt: skip
