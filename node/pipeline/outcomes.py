"""Where a job goes after a slot: its next slot, retry, and the slots catch-up skips.

Pure functions over a claimed job, an outcome and the database time, so the policy is
unit-tested without a database. Parsed schedules are cached by definition, and the slot
after a slot by definition and slot.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import TypeVar

from cluster.jobs.models import RunStatus
from cluster.store.lock.records import NEVER, ClaimedJob, Completion, Skip
from cluster.timing.calendared import origin_of
from cluster.timing.catchup import CatchUp, CatchUpPlan, plan_catchup
from cluster.timing.durations import format_duration
from cluster.timing.jitter import jittered
from cluster.timing.schedule import CHAINED_NEXT, Schedule, parse_schedule
from node.handlers.context import Outcome
from node.pipeline import calendaring

MAX_RETRY_DELAY_S = 3600.0
BROKEN_RETRY_S = 3600.0
CACHE_MAX = 4096

K = TypeVar("K")
V = TypeVar("V")

_schedules: dict[tuple[str, str, str, str], Schedule] = {}
_following: dict[tuple[str, str, str, str, datetime], datetime] = {}


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


def following_slot(job: ClaimedJob) -> datetime:
    """The slot after the job's slot. Remembered: in a fan-out every job of a schedule has
    the same slot, and both the claim and the completion of each ask."""
    if job.calendar_rule is not None and schedule_of(job).at is None:
        return calendaring.next_run(job, schedule_of(job))[0].slot
    key = (job.schedule, job.tz, job.dst_repeated, job.dst_skipped, job.slot)
    return _remember(_following, key, lambda: _after(schedule_of(job), job.slot))


def _after(schedule: Schedule, slot: datetime) -> datetime:
    """The slot after ``slot``; ``NEVER`` after the one slot of a one-off (@at) job."""
    if schedule.at is not None:
        return NEVER
    if schedule.chain:  # the completion takes its next released slot (migration 023)
        return CHAINED_NEXT
    return schedule.next_after(slot)


@functools.lru_cache(maxsize=1024)
def _catch_up(policy: str, grace_s: float, max_backfill: int) -> CatchUp:
    return CatchUp(policy, grace_s, max_backfill)  # type: ignore[arg-type]


def catch_up_of(job: ClaimedJob) -> CatchUp:
    return _catch_up(job.catch_up, job.grace_s, job.max_backfill)


def start_of(job: ClaimedJob, slot: datetime) -> datetime:
    """When ``slot`` of the job starts: the slot plus its jitter offset (cluster.timing.jitter);
    ``NEVER`` stays never (the job is done)."""
    if job.calendar_rule is not None and slot < NEVER and schedule_of(job).at is None:
        return calendaring.start_at(job, calendaring.current(job, schedule_of(job), slot))
    if not job.jitter_s or slot >= NEVER:
        return slot
    return jittered(job.tenant, job.name, slot, job.jitter_s)


def nominal_now(job: ClaimedJob, now: datetime) -> datetime:
    """The clock catch-up reads: ``jitter_s`` behind, so a slot counts as missed only once
    its whole start window has passed (docs/design/time.md)."""
    return now - timedelta(seconds=job.jitter_s) if job.jitter_s else now


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


def _reason(job: ClaimedJob, plan: CatchUpPlan, slot: datetime, now: datetime) -> str:
    late = format_duration(max(0.0, (now - slot).total_seconds()))
    if job.catch_up == "skip":
        return f"missed by {late} (catch-up skip, grace {format_duration(job.grace_s)})"
    if job.catch_up == "backfill":
        return f"missed by {late} (catch-up backfill, beyond the cap of {job.max_backfill})"
    return f"missed by {late} (catch-up once: coalesced into {plan.next_slot.isoformat()})"


def _skips(job: ClaimedJob, plan: CatchUpPlan, now: datetime) -> list[Skip]:
    skips = [Skip(job.id, s, _reason(job, plan, s, now)) for s in plan.skipped]
    if plan.skipped_more and skips:
        first = skips[0]
        note = f"; {plan.skipped_more} older slots were skipped too and are not listed"
        skips[0] = Skip(first.job_id, first.slot, first.reason + note)
    return skips


def _skipped_at_claim(
    job: ClaimedJob, reason: str, next_run_at: datetime, next_slot: datetime, origin: str | None
) -> Completion:
    """The write that records the claimed slot skipped and moves the job to ``next_slot``."""
    return Completion(
        id=job.id,
        token=job.lease_token,
        slot=job.slot,
        outcome="skipped",
        error=reason,
        duration_s=None,
        next_run_at=next_run_at,
        next_slot=next_slot,
        next_attempt=1,
        origin=origin,
    )


def plan_at_claim(job: ClaimedJob, now: datetime) -> tuple[Completion, list[Skip]] | None:
    """None when the claimed slot should run; else the write that skips it instead.

    Only first attempts are re-planned: a retry or a recovered slot has already begun.
    """
    if job.attempt > 1:
        return None
    now = nominal_now(job, now)
    if schedule_of(job).at is not None:  # a one-off: it runs late unless `skip` says no
        return _one_off_at_claim(job, now)
    if job.calendar_rule is not None:
        return _calendar_at_claim(job, now)
    if following_slot(job) > now:
        return None  # the usual case: no later slot is due yet, nothing to catch up
    plan = plan_catchup(schedule_of(job), job.slot, now, catch_up_of(job))
    if plan.next_slot <= job.slot:
        return None
    skips = [s for s in _skips(job, plan, now) if s.slot != job.slot]
    reason = _reason(job, plan, job.slot, now)
    done = _skipped_at_claim(
        job, reason, start_of(job, plan.next_slot), plan.next_slot, origin=None
    )
    return done, skips


def _calendar_at_claim(job: ClaimedJob, now: datetime) -> tuple[Completion, list[Skip]] | None:
    schedule = schedule_of(job)
    following, _ = calendaring.next_run(job, schedule)
    if following.start > now:
        return None
    this = calendaring.current(job, schedule)
    target, skips = calendaring.catch_up(job, schedule, this, now)
    if target.slot == job.slot:
        return None
    reason = next((s.reason for s in skips if s.slot == job.slot), "missed (catch-up)")
    done = _skipped_at_claim(
        job, reason, calendaring.start_at(job, target), target.slot, origin_of(target)
    )
    return done, [s for s in skips if s.slot != job.slot]


def _one_off_at_claim(job: ClaimedJob, now: datetime) -> tuple[Completion, list[Skip]] | None:
    late_s = (now - job.slot).total_seconds()
    if job.catch_up != "skip" or late_s <= job.grace_s:
        return None
    late, grace = format_duration(late_s), format_duration(job.grace_s)
    reason = f"missed by {late} (catch-up skip, grace {grace}); the one-off job is done"
    done = _skipped_at_claim(job, reason, NEVER, job.slot, origin=None)
    return done, []


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
    if job.calendar_rule is not None and schedule_of(job).at is None:
        return _calendar_after_run(job, outcome, nominal_now(job, now))
    following = following_slot(job)
    skips: list[Skip] = []
    nominal = nominal_now(job, now)
    if following >= NEVER:  # a one-off job's slot has run: the job is done
        following = job.slot
        done = Completion(
            id=job.id,
            token=job.lease_token,
            slot=job.slot,
            outcome=outcome.status,
            error=outcome.error,
            duration_s=outcome.duration_s,
            next_run_at=NEVER,
            next_slot=job.slot,
            next_attempt=1,
            output=outcome.output,
            state=outcome.state,
        )
        return done, skips
    if following <= nominal:  # a later slot is due already: the catch-up policy decides
        plan = plan_catchup(schedule_of(job), following, nominal, catch_up_of(job))
        following, skips = plan.next_slot, _skips(job, plan, nominal)
    done = Completion(
        id=job.id,
        token=job.lease_token,
        slot=job.slot,
        outcome=outcome.status,
        error=outcome.error,
        duration_s=outcome.duration_s,
        next_run_at=start_of(job, following),
        next_slot=following,
        next_attempt=1,
        output=outcome.output,
        state=outcome.state,
    )
    return done, skips


def _calendar_after_run(
    job: ClaimedJob, outcome: Outcome, nominal: datetime
) -> tuple[Completion, list[Skip]]:
    schedule = schedule_of(job)
    following, passed = calendaring.next_run(job, schedule)
    skips = list(passed)
    if following.start <= nominal:  # a later run is due already: the catch-up policy decides
        following, caught = calendaring.catch_up(job, schedule, following, nominal)
        skips += caught
    done = Completion(
        id=job.id,
        token=job.lease_token,
        slot=job.slot,
        outcome=outcome.status,
        error=outcome.error,
        duration_s=outcome.duration_s,
        next_run_at=calendaring.start_at(job, following),
        next_slot=following.slot,
        next_attempt=1,
        output=outcome.output,
        origin=origin_of(following),
        state=outcome.state,
    )
    return done, skips


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
