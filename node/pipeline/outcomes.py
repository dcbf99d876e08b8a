"""What a claimed slot's fate means for the node: the write that skips it at its claim, and
the completion of its run (retry, or on to the next slot with the slots skipped between).

The fate itself is decided in one place, ``cluster.timing.fate``; this module only builds a
job's ``TimeRules`` from its claimed row (remembered per definition, with the calendar text
parsed once) and turns a ``Fate`` into the ``Completion`` and ``Skip`` rows the result
writer stores. Pure, so it is unit-tested without a database.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import TypeVar

from cluster.jobs.models import RunStatus
from cluster.store.lock.records import ClaimedJob, Completion, Skip
from cluster.timing import passing
from cluster.timing.calendared import CalendarRule
from cluster.timing.catchup import CatchUp
from cluster.timing.durations import format_duration
from cluster.timing.fate import Fate, Known, TimeRules, fate, on_time
from cluster.timing.schedule import Schedule, parse_schedule
from node.handlers.context import Outcome

__all__ = [
    "after_run",
    "broken",
    "claim_fate",
    "following_slot",
    "gate_skip",
    "plan_at_claim",
    "rules_of",
    "schedule_of",
    "start_of",
]

MAX_RETRY_DELAY_S = 3600.0
# Outcomes that count a failed slot toward --pause-after-failures (completion.sql's `fail`).
PAUSING = frozenset({RunStatus.FAILED, RunStatus.TIMED_OUT})
PAUSED_REASON = "skipped: the job paused after failed slots in a row before it ran"
BROKEN_RETRY_S = 3600.0
CACHE_MAX = 16384

K = TypeVar("K")
V = TypeVar("V")

_schedules: dict[tuple[str, str, str, str], Schedule] = {}
_calendar_rules: dict[str, CalendarRule] = {}
Memo = dict[datetime, Known]
_memos: dict[tuple[str, str, str, str, str | None, datetime | None], Memo] = {}
_rules: dict[tuple[object, ...], TimeRules] = {}


def _remember(cache: dict[K, V], key: K, make: Callable[[], V]) -> V:
    """``cache[key]``, made on a miss; a full cache starts over (job definitions change)."""
    found = cache.get(key)
    if found is None:
        if len(cache) >= CACHE_MAX:
            cache.clear()
        found = cache[key] = make()
    return found


def schedule_of(job: ClaimedJob) -> Schedule:
    """The job's parsed schedule; one dict lookup per run once its definition was seen."""
    key = (job.schedule, job.tz, job.dst_repeated, job.dst_skipped)
    return _remember(_schedules, key, lambda: parse_schedule(*key))  # type: ignore[arg-type]


@functools.lru_cache(maxsize=1024)
def _catch_up(policy: str, grace_s: float, max_backfill: int) -> CatchUp:
    return CatchUp(policy, grace_s, max_backfill)  # type: ignore[arg-type]


def rules_of(job: ClaimedJob) -> TimeRules:
    """The job's time rules, as its claimed row carries them (no statement of its own).
    Jobs with the same schedule and calendar share what they remember of their slots: in a
    fan-out every job of a schedule has the same slot, and the claim and completion ask."""
    key = (
        job.schedule, job.tz, job.dst_repeated, job.dst_skipped, job.calendar_rule,
        job.catch_up, job.grace_s, job.max_backfill, job.tenant, job.name, job.jitter_s,
        job.timing_from,
    )  # fmt: skip
    return _remember(_rules, key, lambda: _make_rules(job))


def _make_rules(job: ClaimedJob) -> TimeRules:
    text = job.calendar_rule
    rule = None if text is None else _remember(_calendar_rules, text, lambda: _parse_rule(text))
    memo_key = (job.schedule, job.tz, job.dst_repeated, job.dst_skipped, text, job.timing_from)
    memo: Memo = _remember(_memos, memo_key, dict)
    return TimeRules(
        # A slot kept from before a change of timing walks on to the new timing's slots
        # after the change (Schedule.starting).
        schedule_of(job).starting(job.timing_from),
        rule,
        _catch_up(job.catch_up, job.grace_s, job.max_backfill),
        job.tenant, job.name, job.jitter_s, memo,
    )  # fmt: skip


def _parse_rule(text: str) -> CalendarRule:
    return CalendarRule.from_json(text)


def claim_fate(job: ClaimedJob, now: datetime) -> Fate:
    """The fate of the claimed slot at ``now``. Only first attempts are decided: a retry or
    a recovered slot has already begun, and runs; so does a slot its named limit let in
    after a wait, which no catch-up missed, and a trigger's, which an operator asked for
    however late it is claimed (the run's completion catches up what is due)."""
    if job.attempt > 1 or job.waited or job.origin == "trigger":
        return on_time(rules_of(job), job.slot)
    return fate(rules_of(job), job.slot, now)


def following_slot(job: ClaimedJob) -> datetime:
    """The slot after the job's slot, on time (no catch-up)."""
    return on_time(rules_of(job), job.slot).next_slot


def start_of(job: ClaimedJob, slot: datetime) -> datetime:
    """When ``slot`` of the job starts: moved or deferred by its rule, plus its jitter;
    ``NEVER`` stays never (the job is done)."""
    rules = rules_of(job)
    return rules.start(rules.decide(slot))


def broken(job: ClaimedJob, exc: Exception, now: datetime) -> Completion:
    """The slot of a job whose stored definition no longer parses: recorded as failed, and
    tried again in an hour (fix the job meanwhile). It never stops the node."""
    return Completion(
        id=job.id,
        token=job.lease_token,
        slot=job.slot,
        outcome="failed",
        error=f"job definition is invalid: {exc}",
        duration_s=None,
        next_run_at=now + timedelta(seconds=BROKEN_RETRY_S),
        next_slot=job.slot,
        next_attempt=job.attempt,
    )


def _skips(job: ClaimedJob, decided: Fate) -> list[Skip]:
    return [Skip(job.id, p.slot, p.reason, p.since, p.more) for p in decided.skips]


def skipped_at_claim(job: ClaimedJob, decided: Fate) -> tuple[Completion, list[Skip]]:
    """The write that records the claimed slot skipped, as ``decided``, and moves the job
    on to its next slot."""
    done = Completion(
        id=job.id,
        token=job.lease_token,
        slot=job.slot,
        outcome="skipped",
        error=decided.reason,
        duration_s=None,
        next_run_at=decided.next_start,
        next_slot=decided.next_slot,
        next_attempt=1,
        origin=decided.next_origin,
    )
    return done, _skips(job, decided)


def plan_at_claim(job: ClaimedJob, now: datetime) -> tuple[Completion, list[Skip]] | None:
    """None when the claimed slot should run; else the write that skips it instead."""
    decided = claim_fate(job, now)
    return None if decided.runs else skipped_at_claim(job, decided)


def after_run(job: ClaimedJob, outcome: Outcome, now: datetime) -> tuple[Completion, list[Skip]]:
    """The completion of a run: retry the same slot, or move on to the next one."""
    # A cancelled slot is not retried (someone asked for it to stop), nor a skipped one.
    retried = outcome.status not in {RunStatus.SUCCEEDED, RunStatus.CANCELLED, RunStatus.SKIPPED}
    if retried and job.attempt <= job.retries:
        delay = min(MAX_RETRY_DELAY_S, job.retry_backoff_s * 2 ** (job.attempt - 1))
        retry_at = now + timedelta(seconds=delay)
        done = Completion(
            id=job.id,
            token=job.lease_token,
            slot=job.slot,
            outcome=outcome.status,
            error=f"{outcome.error} (attempt {job.attempt}; retry in {format_duration(delay)})",
            duration_s=outcome.duration_s,
            next_run_at=retry_at,
            next_slot=job.slot,
            next_attempt=job.attempt + 1,
            output=outcome.output,
            state=outcome.state,
        )
        return done, []
    rules = rules_of(job)
    decided = fate(rules, job.slot, now, ran=True)
    done = Completion(
        id=job.id,
        token=job.lease_token,
        slot=job.slot,
        outcome=outcome.status,
        error=outcome.error,
        duration_s=outcome.duration_s,
        next_run_at=decided.next_start,
        next_slot=decided.next_slot,
        next_attempt=1,
        output=outcome.output,
        origin=decided.next_origin,
        state=outcome.state,
    )
    skips = _skips(job, decided)
    if outcome.status in PAUSING and job.slot < decided.next_slot <= now and not job.flight:
        skips += _owed_if_paused(job, rules, decided.next_slot, now)
    return done, skips


def _owed_if_paused(job: ClaimedJob, rules: TimeRules, slot: datetime, now: datetime) -> list[Skip]:
    """The slots from ``slot`` (the next one, due already) up to ``now``: should this failed
    slot pause the job (``--pause-after-failures``, decided by the completion statement),
    it stops short of them, and they are recorded skipped in the same statement."""
    timing = passing.Timing(rules.schedule, rules.rule)
    return [
        Skip(job.id, at, why, since, if_paused=True)
        for at, why, since in passing.passed(timing, slot, now, PAUSED_REASON)
    ]


def gate_skip(job: ClaimedJob, verdict: str, now: datetime) -> tuple[Completion, list[Skip]]:
    """The write that records a gated slot skipped: ``verdict`` is its gate's ``skip: why``
    (an upstream slot skipped, never run, or failed under after-failure skip) or ``wait:
    why`` (its after-timeout came first: the reason says how long it was held)."""
    kind, _, why = verdict.partition(": ")
    if kind == "wait":
        held_s = round(max(0.0, (now - job.slot).total_seconds()))
        why += f"; held {format_duration(held_s)} (after-timeout)"
    done, skips = after_run(job, Outcome("skipped", why, 0.0), now)
    return done._replace(duration_s=None), skips
