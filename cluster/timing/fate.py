"""A slot's fate: whether it runs, when it starts, why it is skipped, which slots are
recorded skipped on the way and which slot comes next, as one pure function of the job's
time rules and the clock (docs/design/fate.md).

``fate(rules, slot, now)`` is asked when a node claims ``slot`` (does it run, or is it
skipped, and where does the job go then); ``fate(rules, slot, now, ran=True)`` when its run
ended (where does the job go next). ``pulse jobs show --explain`` and ``--outage`` walk a
job's slots through the same function (``cluster.timing.timeline``), so what they print is
what a node does.

The rules: the schedule (one-off, several entries, chained), the calendar and blackout
windows (``CalendarRule``, which may skip, move or defer a slot), catch-up (``CatchUp``) and
jitter. Pauses, ``skip-next`` and gates are the store's and the gate's: they change which
slot the job holds, or skip it with their own reason, before the claim asks here.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import NamedTuple

from cluster.timing.calendared import CalendarRule, Decision, jittered_start
from cluster.timing.catchup import DEFAULT_RECORD_LIMIT, CatchUp, plan_catchup
from cluster.timing.durations import format_duration
from cluster.timing.instants import US
from cluster.timing.runs import origin_of
from cluster.timing.schedule import CHAINED_NEXT, ENDED, Schedule

__all__ = [
    "NEVER",
    "Fate",
    "Known",
    "Passed",
    "TimeRules",
    "fate",
    "first_kept",
    "on_time",
    "skipped_between",
]

NEVER = ENDED  # next_run_at of a job that is done (records.NEVER)
MAX_DUE_WALK = 100_000  # due runs walked after an outage; older ones beyond are coalesced
MEMO_MAX = 1024


class Passed(NamedTuple):
    """A slot recorded skipped on the way: by the rule (calendar, window) or by catch-up.
    ``since``: the record also stands for the ``more`` unlisted slots from then up to its
    own (a long outage lists the newest slots only; ``runs.skipped_from``)."""

    slot: datetime
    reason: str
    missed: bool = False  # dropped by the catch-up policy (else the rule's skip)
    since: datetime | None = None
    more: int = 0


# What a slot's fate needs of its rule, remembered per slot: its decision, and the run after
# it (after the slot taken as a run, if the rule skips it) with the rule's skips before it.
Known = tuple[Decision, Decision, tuple["Passed", ...]]


@dataclass(frozen=True, eq=False)
class TimeRules:
    """Everything time-related a job's slots obey. ``rule`` is None for a job without a
    calendar or window. ``memo`` remembers each slot's decision and the run after it (a
    claim and its completion both ask): rules with the same schedule and rule may share
    one, as the jobs of a fan-out do."""

    schedule: Schedule
    rule: CalendarRule | None = None
    catch_up: CatchUp = field(default_factory=CatchUp)
    tenant: str = ""
    name: str = ""
    jitter_s: float = 0.0
    memo: dict[datetime, Known] = field(default_factory=dict, repr=False)

    def known(self, slot: datetime) -> Known:
        """``slot``'s decision, the run after it and the rule's skips before that."""
        found = self.memo.get(slot)
        if found is None:
            if len(self.memo) >= MEMO_MAX:
                self.memo.clear()
            this = self._decide(slot)
            run = this if this.runs else Decision(slot, slot, True)
            found = self.memo[slot] = (this, *self._next_run(run))
        return found

    def decide(self, slot: datetime) -> Decision:
        """``slot`` as the rule decides it now (runs, moved, deferred, or skipped)."""
        return self.known(slot)[0]

    def next_run(self, run: Decision) -> tuple[Decision, tuple[Passed, ...]]:
        """The run after ``run`` (a slot's decision) on schedule, and the slots the rule
        skips before it."""
        _, following, passed = self.known(run.slot)
        return following, passed

    def start(self, run: Decision) -> datetime:
        """When ``run`` starts: its (moved) start plus its slot's jitter; the far-future
        markers (done, waiting for a chain's release) stay as they are."""
        if run.slot >= CHAINED_NEXT:
            return run.slot
        if not self.jitter_s:
            return run.start
        return jittered_start(run, self.tenant, self.name, self.jitter_s)

    def _decide(self, slot: datetime) -> Decision:
        if self.rule is None or self.schedule.at is not None:
            return Decision(slot, slot, True)
        if self.schedule.next_after(slot - US) != slot:
            # Not a slot of the schedule (a trigger's, stamped with its time): it runs now,
            # whatever the calendar or a window says (tests/unit/test_fate.py).
            return Decision(slot, slot, True)
        return self.rule.decide_exactly(self.schedule, slot)

    def _next_run(self, run: Decision) -> tuple[Decision, tuple[Passed, ...]]:
        schedule = self.schedule
        if schedule.at is not None:
            return Decision(NEVER, NEVER, True), ()
        if schedule.chain:  # the completion takes its next released slot (migration 023)
            return Decision(CHAINED_NEXT, CHAINED_NEXT, True), ()
        if self.rule is None:
            slot = schedule.next_after(run.slot)
            return Decision(slot, slot, True), ()
        following, skipped = self.rule.next_run(schedule, run)
        return following, tuple(_rule_skip(d) for d in skipped)


class Fate(NamedTuple):
    """What happens to ``slot`` and where the job goes after it.

    ``runs``: the slot runs, starting at ``start`` (moved, deferred, jittered); else it is
    recorded skipped for ``reason``. ``next_slot`` starts at ``next_start`` (``NEVER``: the
    job is done); ``skips`` are the slots between to record skipped, the oldest
    ``skipped_more`` not listed: one listed skip stands for them (``Passed.since``, its
    reason says how many). At a claim that runs the slot,
    ``next_slot`` is the slot after it on time and ``skips`` is empty: the completion asks
    again with its own clock. A named tuple, not a frozen dataclass: the node makes two
    per fire.
    """

    slot: datetime
    runs: bool
    start: datetime
    reason: str | None
    origin: str | None  # of the slot's run: 'calendar' (moved), 'window' (deferred), None
    next_slot: datetime
    next_start: datetime
    next_origin: str | None
    skips: tuple[Passed, ...] = ()
    skipped_more: int = 0


def fate(rules: TimeRules, slot: datetime, now: datetime, *, ran: bool = False) -> Fate:
    """The fate of ``slot`` claimed at ``now`` (``ran``: its run ended at ``now``).

    At a claim, the due runs are those starting by ``now`` or by the slot's own start,
    whichever is later (a slot claimed a moment early, or deferred to a window's end with
    others): the catch-up policy keeps some of them, and the slot runs if it is one of
    those kept. ``now`` is the database clock; catch-up reads it ``jitter_s`` behind, so a
    slot counts as missed only once its whole start window has passed.
    """
    nominal = now - timedelta(seconds=rules.jitter_s) if rules.jitter_s else now
    if rules.schedule.at is not None:
        return _one_off(rules, slot, nominal, ran)
    this, following, passed = rules.known(slot)
    if ran and following.start > nominal and following.slot < NEVER:  # the usual completion
        return Fate(
            slot, True, rules.start(this), None, origin_of(this),
            following.slot, rules.start(following), origin_of(following), passed,
        )  # fmt: skip
    if ran or not this.runs:
        # After its run, or a slot the rule skips now (a window or calendar changed since
        # it was planned): on from it, catching up what is due.
        run = this if this.runs else Decision(slot, slot, True)
        return _onward(rules, run, nominal, ran=ran, reason=this.reason)
    at = max(nominal, this.start)
    if following.start > at:
        return _running(rules, this, following)
    # The claimed slot, the first due, is recorded by its own write, listed or not.
    target, caught, more = _catch_up(rules, this, at, own_first=True)
    if target.slot == slot:
        return _running(rules, this, following)
    # Unlisted after a long outage, it is missed all the same.
    reason = next((p.reason for p in caught if p.slot == slot), None)
    reason = reason or _missed(rules, this, target, at)
    return Fate(
        slot, False, rules.start(this), reason, origin_of(this),
        target.slot, rules.start(target), origin_of(target),
        tuple(p for p in caught if p.slot != slot), more,
    )  # fmt: skip


def on_time(rules: TimeRules, slot: datetime) -> Fate:
    """``slot`` running as planned (a retry, a recovered slot): its start and the next."""
    this, following, _ = rules.known(slot)
    this = this if this.runs else Decision(slot, slot, True)
    return _running(rules, this, following)


def _running(rules: TimeRules, this: Decision, following: Decision) -> Fate:
    return Fate(
        this.slot, True, rules.start(this), None, origin_of(this),
        following.slot, rules.start(following), origin_of(following),
    )  # fmt: skip


def _onward(
    rules: TimeRules, run: Decision, nominal: datetime, *, ran: bool, reason: str | None
) -> Fate:
    """From the run ``run`` (or a skipped slot taken as one) on to the next run, with the
    catch-up policy over the runs already due by ``nominal``."""
    following, passed = rules.next_run(run)
    skips, more = list(passed), 0
    if following.slot >= NEVER:  # a schedule whose entries all ended: the job is done
        return Fate(run.slot, ran, run.start, reason, None, run.slot, NEVER, None, tuple(skips))
    if following.start <= nominal:  # a later run is due already: the catch-up policy decides
        following, caught, more = _catch_up(rules, following, nominal)
        skips += caught
    return Fate(
        run.slot, ran, rules.start(run), None if ran else reason, origin_of(run),
        following.slot, rules.start(following), origin_of(following),
        tuple(sorted(skips)), more,
    )  # fmt: skip


def _catch_up(
    rules: TimeRules, first: Decision, now: datetime, *, own_first: bool = False
) -> tuple[Decision, list[Passed], int]:
    """The run to do next from the due run ``first`` on, the slots dropped on the way (the
    rule's skips among them) and how many more were only counted (``own_first``: not
    ``first``, whose record its caller writes)."""
    if rules.rule is None:
        plan = plan_catchup(rules.schedule, first.slot, now, rules.catch_up)
        target = Decision(plan.next_slot, plan.next_slot, True)
        dropped = [Passed(s, _missed(rules, Decision(s, s, True), target, now), True)
                   for s in plan.skipped]  # fmt: skip
        more = plan.skipped_more  # the oldest due slots, ``first`` among them
        if more and dropped:
            more = _stand_for_older(rules, dropped, 0, first.slot, more, own_first)
        return target, dropped, more
    return _catch_up_calendar(rules, rules.rule, first, now, own_first)


def _catch_up_calendar(
    rules: TimeRules, rule: CalendarRule, first: Decision, now: datetime, own_first: bool
) -> tuple[Decision, list[Passed], int]:
    catch_up = rules.catch_up
    due: deque[Decision] = deque(maxlen=DEFAULT_RECORD_LIMIT + max(1, catch_up.max_backfill))
    skipped: deque[Passed] = deque(maxlen=DEFAULT_RECORD_LIMIT)
    future: Decision | None = None
    due.append(first)
    runs_met, skips_met = 1, 0  # the deques keep the newest: the oldest may be gone
    for count, decision in enumerate(rule.decisions_after(rules.schedule, first)):
        if not decision.runs:
            skipped.append(_rule_skip(decision))
            skips_met += 1
            continue
        if decision.start > now or count > MAX_DUE_WALK:
            future = decision
            break
        due.append(decision)
        runs_met += 1
    runs = list(due)
    kept = first_kept(runs, catch_up, now)
    target = runs[kept] if kept < len(runs) else future
    assert target is not None, "the walk ends at a future run"
    dropped = [p for p in skipped if p.slot < target.slot]
    dropped += [Passed(d.slot, _missed(rules, d, target, now), True) for d in runs[:kept]]
    dropped.sort()
    runs_gone, skips_gone = runs_met - len(due), skips_met - len(skipped)
    more = runs_gone + skips_gone
    if more and dropped:
        # Slots older than the oldest each overflowing deque kept were let go unlisted: the
        # first listed record from there stands for them.
        oldest = [due[0].slot] if runs_gone else []
        oldest += [skipped[0].slot] if skips_gone else []
        kept_from = max(oldest)
        at = next((i for i, p in enumerate(dropped) if p.slot >= kept_from), None)
        own = own_first and runs_gone > 0  # ``first`` left the deque: unlisted
        if at is not None:  # else what was let go lies past the target: not passed yet
            more = _stand_for_older(rules, dropped, at, first.slot, more, own)
    return target, dropped, more


def _stand_for_older(
    rules: TimeRules, dropped: list[Passed], at: int, oldest: datetime, more: int, own: bool
) -> int:
    """Make ``dropped[at]`` stand for the ``more`` unlisted slots from ``oldest`` on (``own``:
    but ``oldest``, which has a record of its own); how many it stands for."""
    since = rules.schedule.next_after(oldest) if own else oldest
    more -= own
    if more > 0 and since < dropped[at].slot:
        note = (
            f"; {more} older slots, from {since.isoformat()}, were skipped too and are not listed"
        )
        dropped[at] = dropped[at]._replace(reason=dropped[at].reason + note, since=since, more=more)
    return more


def first_kept(runs: list[Decision], catch_up: CatchUp, now: datetime) -> int:
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


def _missed(rules: TimeRules, run: Decision, target: Decision, now: datetime) -> str:
    """Why catch-up drops ``run``: a deferred slot names its window first (an alert says
    the first reason), and is as late as its nominal time."""
    catch_up = rules.catch_up
    since = run.slot if run.deferred else run.start
    late = format_duration(max(0.0, (now - since).total_seconds()))
    if catch_up.policy == "skip":
        why = f"missed by {late} (catch-up skip, grace {format_duration(catch_up.grace_s)})"
    elif catch_up.policy == "backfill":
        why = f"missed by {late} (catch-up backfill, beyond the cap of {catch_up.max_backfill})"
    else:
        why = f"missed by {late} (catch-up once: coalesced into {target.slot.isoformat()})"
    return f"{run.reason}; {why}" if run.deferred and run.reason else why


def _rule_skip(decision: Decision) -> Passed:
    return Passed(decision.slot, decision.reason or "skipped by the calendar")


def _one_off(rules: TimeRules, slot: datetime, nominal: datetime, ran: bool) -> Fate:
    """A one-off (@at) job: its slot runs late unless catch-up ``skip`` says no; then done."""
    start = rules.start(Decision(slot, slot, True))
    late_s = (nominal - slot).total_seconds()
    catch_up = rules.catch_up
    if ran or catch_up.policy != "skip" or late_s <= catch_up.grace_s:
        return Fate(slot, True, start, None, None, slot, NEVER, None)
    late, grace = format_duration(late_s), format_duration(catch_up.grace_s)
    reason = f"missed by {late} (catch-up skip, grace {grace}); the one-off job is done"
    return Fate(slot, False, start, reason, None, slot, NEVER, None)


def skipped_between(
    schedule: Schedule,
    rule: CalendarRule | None,
    after: datetime,
    before: datetime,
    limit: int = MAX_DUE_WALK,
) -> list[Passed]:
    """The first ``limit`` slots in ``(after, before)`` the rule skips: what a job planned
    afresh at ``before`` (created, or re-planned by a calendar or window change) passes
    without a completion to record them (``record_planned_skips``)."""
    if rule is None or schedule.at is not None or schedule.chain or before <= after:
        return []
    found: list[Passed] = []
    for count, decision in enumerate(rule.decisions_after(schedule, after)):
        if decision.slot >= before or count > MAX_DUE_WALK or len(found) >= limit:
            break
        if not decision.runs:
            found.append(_rule_skip(decision))
    return found
