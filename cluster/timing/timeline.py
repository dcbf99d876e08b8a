"""A job's timeline explained, as pure arithmetic: each coming slot with its DST rule, its
calendar decision, its blackout window and its jitter (``explain``), and what catch-up
would run, skip or backfill after an outage (``outage``). ``pulse schedule --explain``,
``pulse jobs show --explain`` and ``--outage FROM..TO`` print these (docs/time.md).
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from zoneinfo import ZoneInfo

from cluster.timing.calendared import CalendarRule, Decision, jittered_start
from cluster.timing.catchup import CatchUp
from cluster.timing.durations import format_duration
from cluster.timing.instants import US
from cluster.timing.schedule import ENDED, Schedule

__all__ = ["Step", "decisions", "entry_note", "explain", "first_kept", "outage"]

MAX_OUTAGE_SLOTS = 100_000


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


def explain(
    schedule: Schedule,
    rule: CalendarRule | None,
    after: datetime,
    runs: int,
    *,
    tenant: str = "",
    name: str = "",
    jitter_s: float = 0.0,
) -> list[Step]:
    """The next ``runs`` runs after ``after``, and the slots skipped among them."""
    steps: list[Step] = []
    count = 0
    for decision in itertools.islice(decisions(schedule, rule, after), runs * 50):
        if count >= runs or decision.slot >= ENDED:
            break
        notes = [_dst_note(schedule, decision.slot)]
        if schedule.entries:
            notes.append(entry_note(schedule, decision.slot))
        if rule is not None and rule.calendar.name and decision.runs and not decision.moved:
            notes.append(f"calendar {rule.calendar.name}: a business day")
        if decision.reason:
            notes.append(decision.reason)
        if not decision.runs:
            steps.append(Step(decision.slot, None, "skipped", tuple(notes)))
            continue
        count += 1
        start = jittered_start(decision, tenant, name, jitter_s)
        if start != decision.start:
            notes.append(f"jitter +{format_duration((start - decision.start).total_seconds())}")
        action = "deferred" if decision.deferred else "moved" if decision.moved else "runs"
        steps.append(Step(decision.slot, start, action, tuple(notes)))
    return steps


def first_kept(runs: Sequence[Decision], catch_up: CatchUp, now: datetime) -> int:
    """Of the due ``runs`` (oldest first, at least one), the index of the first that runs:
    the older ones are skipped as missed (the catch-up policy, on runs)."""
    if catch_up.policy == "skip":
        grace = timedelta(seconds=catch_up.grace_s)
        # A slot deferred by a blackout window is as late as its nominal time says.
        late = [(d.slot if d.deferred else d.start) < now - grace for d in runs]
        return next((i for i, is_late in enumerate(late) if not is_late), len(runs))
    if catch_up.policy == "backfill":
        return max(0, len(runs) - catch_up.max_backfill)
    return len(runs) - 1


def outage(
    schedule: Schedule,
    rule: CalendarRule | None,
    catch_up: CatchUp,
    start: datetime,
    end: datetime,
) -> list[Step]:
    """What happens to the slots due in ``[start, end]`` if no node ran from ``start`` and
    the cluster is back at ``end``: the policy's runs (``catch-up`` at ``end``, or
    ``backfill`` in order), the slots it drops (``missed``), and the rule's skips."""
    due: list[Decision] = []
    skipped: list[Step] = []
    for decision in decisions(schedule, rule, start - US):
        if decision.runs and decision.start > end:
            break
        if len(due) + len(skipped) >= MAX_OUTAGE_SLOTS:
            break
        if decision.runs:
            due.append(decision)
        else:
            skipped.append(Step(decision.slot, None, "skipped", (decision.reason or "",)))
    steps = list(skipped)
    if due:
        kept = first_kept(due, catch_up, end)
        for index, decision in enumerate(due):
            late = format_duration(max(0.0, (end - decision.start).total_seconds()))
            if index < kept:
                why = f"missed by {late} (catch-up {catch_up.policy})"
                steps.append(Step(decision.slot, None, "missed", (why,)))
            else:
                action = "catch-up" if catch_up.policy != "backfill" else "backfill"
                why = f"runs at {end.isoformat()}, {late} late (catch-up {catch_up.policy})"
                steps.append(Step(decision.slot, end, action, (why,)))
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
