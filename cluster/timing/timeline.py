"""A job's timeline explained, walked through the same function a node asks
(``cluster.timing.fate``): each slot with its DST rule, its calendar decision, its blackout
window, its jitter and what catch-up makes of it (``explain``), and what catch-up would
run, skip or backfill after an outage (``outage``). ``pulse schedule --explain``, ``pulse
jobs show --explain`` and ``--outage FROM..TO`` print these (docs/time.md), and plans show
them (docs/design/fate.md).
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta
from zoneinfo import ZoneInfo

from cluster.timing.calendared import CalendarRule, Decision
from cluster.timing.catchup import CatchUp
from cluster.timing.durations import format_duration
from cluster.timing.fate import Fate, TimeRules, fate
from cluster.timing.instants import US
from cluster.timing.schedule import CHAINED_NEXT, ENDED, Schedule

__all__ = [
    "MAX_OUTAGE_SLOTS",
    "Step",
    "decisions",
    "entry_note",
    "expected",
    "explain",
    "outage",
    "walk",
]

MAX_OUTAGE_SLOTS = 100_000
WALK_PER_RUN = 50  # slots walked per run asked for: a rule that skips more ends the list


@dataclass(frozen=True)
class Step:
    """One slot of the timeline: where it starts (None: it does not run), and why."""

    slot: datetime
    start: datetime | None
    action: str  # runs | moved | deferred | skipped | catch-up | backfill | missed
    notes: tuple[str, ...]

    def to_json(self) -> dict[str, object]:
        return {
            "slot": self.slot.isoformat(),
            "start": None if self.start is None else self.start.isoformat(),
            "action": self.action,
            "notes": list(self.notes),
        }


def decisions(schedule: Schedule, rule: CalendarRule | None, after: datetime) -> Iterator[Decision]:
    """Every slot's decision after ``after``: the rule's, or each slot running."""
    if rule is not None:
        return rule.decisions_after(schedule, after)
    return (Decision(slot, slot, True) for slot in schedule.iter_after(after))


def _first(rules: TimeRules, after: datetime) -> datetime | None:
    """The first slot after ``after`` that the job meets (a run, or a slot skipped)."""
    if rules.schedule.at is not None:
        return rules.schedule.at if rules.schedule.at > after else None
    if rules.schedule.chain:
        return None  # no clock: a chained job's slots are its upstream's successes
    found = next(iter(decisions(rules.schedule, rules.rule, after)), None)
    return None if found is None or found.slot >= ENDED else found.slot


def explain(
    schedule: Schedule,
    rule: CalendarRule | None,
    after: datetime,
    runs: int,
    *,
    tenant: str = "",
    name: str = "",
    jitter_s: float = 0.0,
    catch_up: CatchUp | None = None,
) -> list[Step]:
    """The next ``runs`` runs after ``after`` and the slots skipped among them, each slot's
    fate as a node decides it when the slot's time comes (claimed at its start, run at
    once): a window's deferred slots coalesced as catch-up says, the calendar's skips."""
    rules = TimeRules(schedule, rule, catch_up or CatchUp(), tenant, name, jitter_s)
    steps: list[Step] = []
    count = 0
    for step in itertools.islice(walk(rules, after), runs * WALK_PER_RUN):
        steps.append(step)
        count += step.start is not None
        if count >= runs:
            break  # the slots skipped after the last run listed belong to the next
    return steps


def expected(rules: TimeRules, after: datetime, until: datetime) -> Iterator[Step]:
    """Every slot in ``(after, until]`` a job with ``rules`` should have had, in order, with
    its fate on a cluster that ran it on time: what a ledger of its runs is checked against
    (a slot whose fate is to run: its run; any other: a skip with that reason)."""
    return itertools.takewhile(lambda step: step.slot <= until, walk(rules, after))


def walk(rules: TimeRules, after: datetime) -> Iterator[Step]:
    """The job's slots after ``after`` in order, each claimed at its own start and its run
    ended at once, through ``fate``: runs, moves and deferrals, and the slots skipped or
    dropped (``missed``) on the way, each with its reason."""
    slot = _first(rules, after)
    while slot is not None and slot < CHAINED_NEXT:
        decision = rules.decide(slot)
        claimed = fate(rules, slot, rules.start(decision) if decision.runs else slot)
        if not claimed.runs:
            yield _skipped(rules, slot, claimed.reason or "", missed=decision.runs)
            onward = claimed
        else:
            yield _ran(rules, decision, claimed)
            onward = fate(rules, slot, claimed.start, ran=True)
        for passed in sorted(onward.skips):
            yield _skipped(rules, passed.slot, passed.reason, missed=passed.missed)
        slot = None if onward.next_start >= ENDED else onward.next_slot


def _ran(rules: TimeRules, decision: Decision, claimed: Fate) -> Step:
    notes = [*_slot_notes(rules.schedule, decision.slot)]
    rule = rules.rule
    if rule is not None and rule.calendar.name and not decision.moved:
        notes.append(f"calendar {rule.calendar.name}: a business day")
    if decision.reason:
        notes.append(decision.reason)
    if claimed.start != decision.start:
        notes.append(f"jitter +{format_duration((claimed.start - decision.start).total_seconds())}")
    action = "deferred" if decision.deferred else "moved" if decision.moved else "runs"
    return Step(decision.slot, claimed.start, action, tuple(notes))


def _skipped(rules: TimeRules, slot: datetime, reason: str, *, missed: bool) -> Step:
    notes = (*_slot_notes(rules.schedule, slot), reason)
    return Step(slot, None, "missed" if missed else "skipped", notes)


def _slot_notes(schedule: Schedule, slot: datetime) -> list[str]:
    notes = [_dst_note(schedule, slot)]
    if schedule.entries:
        notes.append(entry_note(schedule, slot))
    return notes


def outage(
    schedule: Schedule,
    rule: CalendarRule | None,
    catch_up: CatchUp,
    start: datetime,
    end: datetime,
    *,
    tenant: str = "",
    name: str = "",
    jitter_s: float = 0.0,
) -> list[Step]:
    """What happens to the slots of ``[start, end]`` if no node ran from ``start`` and the
    cluster is back at ``end``: each slot claimed at ``end`` through the job's fate, so the
    policy's runs (``catch-up`` at ``end``, or ``backfill`` in order), the slots it drops
    (``missed``) and the rule's skips. Nothing after ``end`` is listed."""
    rules = TimeRules(schedule, rule, catch_up, tenant, name, jitter_s)
    steps: list[Step] = []
    slot: datetime | None = None
    for decision in decisions(schedule, rule, start - US):  # the rule's skips before the first run
        if decision.slot > end or decision.slot >= ENDED:
            break
        if decision.runs:
            slot = decision.slot
            break
        steps.append(Step(decision.slot, None, "skipped", (decision.reason or "",)))
    action = "backfill" if catch_up.policy == "backfill" else "catch-up"
    while slot is not None and len(steps) < MAX_OUTAGE_SLOTS:
        claimed = fate(rules, slot, end)
        if claimed.start > end:
            break  # not due by the end of the outage: it runs on time
        if claimed.runs:
            late = format_duration(max(0.0, (end - claimed.start).total_seconds()))
            why = f"runs at {end.isoformat()}, {late} late (catch-up {catch_up.policy})"
            steps.append(Step(slot, end, action, (why,)))
            onward = fate(rules, slot, end, ran=True)
        else:
            steps.append(Step(slot, None, "missed", (claimed.reason or "",)))
            onward = claimed
        for p in onward.skips:
            if p.slot <= end:
                steps.append(Step(p.slot, None, "missed" if p.missed else "skipped", (p.reason,)))
        slot = None if onward.next_start >= ENDED else onward.next_slot
    return sorted(steps, key=lambda step: step.slot)


def entry_note(schedule: Schedule, slot: datetime) -> str:
    """Which of a job's several schedules ``slot`` comes from."""
    index = schedule.entry_at(slot)
    if index is None:
        return "no schedule's slot"
    entry = schedule.entries[index]
    payload = " (with its payload)" if entry.payload else ""
    return f"schedule {index + 1} of {len(schedule.entries)}: {entry.expr}{payload}"


def _dst_note(schedule: Schedule, slot: datetime) -> str:
    zone = ZoneInfo(schedule.tz)
    local = slot.astimezone(zone)
    wall = f"{local.strftime('%a %Y-%m-%d %H:%M:%S')} {schedule.tz} (UTC{_offset(local)})"
    if schedule.tz == "UTC":
        return wall
    other = local.replace(fold=1 - local.fold)
    if other.utcoffset() != local.utcoffset():
        which = "first" if local.fold == 0 else "second"
        rule = f"dst_repeated={schedule.dst_repeated}"
        return f"{wall}; the repeated hour: its {which} occurrence ({rule})"
    before, after = (slot - US).astimezone(zone).utcoffset(), local.utcoffset()
    if before is not None and after is not None and after > before:
        return f"{wall}; the first instant after the DST gap (dst_skipped={schedule.dst_skipped})"
    return wall


def _offset(local: datetime) -> str:
    offset = local.utcoffset() or timedelta(0)
    sign = "-" if offset < timedelta(0) else "+"
    minutes = abs(int(offset.total_seconds())) // 60
    return f"{sign}{minutes // 60:02d}:{minutes % 60:02d}"
