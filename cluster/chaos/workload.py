"""The chaos workload: a seeded mix of second-level ``@every`` jobs run by the witness.

Most jobs are short and frequent; about one in seven runs for 6-8 s, longer than the time
it takes to detect a dead node, so faults often hit runs in flight. Catch-up policies are
mixed (``once``, ``skip`` with a short grace, ``backfill`` with a small cap) so that every
policy's bookkeeping of missed slots is checked. Every job has ``RETRIES`` retries: a lost
attempt counts against them, and the checks expect an attempt a fault took away to run
again (a slot whose last attempt was lost is recorded failed instead).

Every ``EFFECTS_EVERY``-th job, unless it is a long one, is an effect job (``kind``
``effects``), run by ``cluster.chaos.ledger:record``, which writes one row per run through
``ctx.transaction()`` and holds the transaction open for the run; the checks then hold the
ledger to exactly one row per slot that succeeded. A Postgres fault breaks the transactions
in flight, and a handler learns it only when its block ends: the run then fails and is
retried. Effect jobs are short and retry after ``EFFECTS_RETRY_BACKOFF_S``, so that re-run
comes within the failover bound like any other. ``kind`` names the checks a job is subject
to beyond the common ones (``cluster.chaos.verdict.kinds``).

Two more kinds are appended after the ``count`` jobs, whatever the seed:

- ``allow``: ``ALLOW_JOBS`` jobs ``@every 1s`` with overlap ``allow``, whose runs hold
  ``ALLOW_HOLD_S`` (longer than the interval), so up to ``ALLOW_MAX_CONCURRENT`` of their
  slots run side by side as flights, each under its own lease (docs/design/overlap.md).
  Their places suffice for the steady state (three 2.5 s runs per 3 s), so slots wait for
  a free place only around faults, and catch-up ``once`` bounds how far behind they fall.
- ``replace``: ``REPLACE_JOBS`` jobs ``@every 2s`` with overlap ``replace`` whose runs
  hold ``REPLACE_HOLD_S``, more than two intervals: the sync witness handler never looks at
  ``ctx.cancelled``, so every slot is replaced by the next one, which must start at once.
- ``dependent``: a chain with a fan-in, every ``DEPENDENT_INTERVAL_S``: ``chaos-dep-up``,
  two jobs after it, one after both (``--after``, match ``same``, after-failure ``skip``, so
  a slot whose upstream failed is recorded skipped and still accounted for; they backfill,
  so every slot runs in order however late its upstream was); then a chain of two chained
  jobs, ``chaos-chain-1`` ``@after:chaos-dep-up`` and ``chaos-chain-2`` after it, whose
  slots are the successes of their upstream (docs/design/chains.md).
- ``keyed``: ``KEYED_JOBS`` jobs ``@every 1s`` holding ``KEYED_HOLD_S`` that share the named
  limit ``KEY`` (``KEY_LIMIT`` runs at once, docs/limits.md), more than it lets run at once
  in the steady state only now and then, so slots wait for it briefly; the check holds the
  key to its limit from the runs' start and end times.
- ``pinned``: one job pinned to each zone, and one to each pair of neighbouring zones
  (``zone-a,zone-b``, ...; with two zones, one job pinned to both). They backfill
  (``PINNED_MAX_BACKFILL``), so the slots a dark zone missed run when it returns and the
  loss check still holds them all to account.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass

from cluster.chaos import ledger
from cluster.jobs.fields import DEFAULT_RETRY_BACKOFF_S as DEFAULT_BACKOFF_S
from cluster.jobs.spec import JobSpec

HANDLER = "cluster.chaos.witness:record"
HANDLERS = {
    "witness": HANDLER,
    "effects": ledger.HANDLER,
    "allow": HANDLER,
    "replace": HANDLER,
    "pinned": HANDLER,
    "dependent": HANDLER,
    "keyed": HANDLER,
}
EFFECTS_EVERY = 8
EFFECTS_RETRY_BACKOFF_S = 1.0
SHORT_INTERVALS_S = (1, 2, 3, 5)
LONG_INTERVALS_S = (10, 12, 15)
LONG_SHARE = 0.15
RUN_TIMEOUT_S = 60.0
# More than one fault can take from a slot: faults never overlap, but a long run lost to one
# may run again on a node the next fault hits.
RETRIES = 2
ALLOW_JOBS = 3
ALLOW_HOLD_S = 2.5
ALLOW_MAX_CONCURRENT = 3
REPLACE_JOBS = 2
KEYED_JOBS = 4
KEYED_HOLD_S = 0.4
KEY = "chaos-key"
KEY_LIMIT = 2  # runs holding KEY at once
REPLACE_INTERVAL_S = 2
REPLACE_HOLD_S = 5.0
PINNED_INTERVAL_S = 2
PINNED_MAX_BACKFILL = 100
DEPENDENT_INTERVAL_S = 2
DEPENDENT_SLEEP_S = 0.3


@dataclass(frozen=True)
class JobDef:
    """One workload job, with what the checker needs to know about it."""

    name: str
    interval_s: int
    catch_up: str
    grace_s: float
    max_backfill: int
    sleep_s: float
    kind: str = "witness"  # a key of HANDLERS
    max_concurrent: int = 1  # > 1: overlap allow (kind ``allow``)
    zones: tuple[str, ...] = ()  # pinned to these zones (kind ``pinned``)
    after: tuple[str, ...] = ()  # upstream jobs (kind ``dependent``)
    chained: bool = False  # an @after: job: its slots are its upstreams' successes
    uses: tuple[str, ...] = ()  # named limits (kind ``keyed``)

    def spec(self) -> JobSpec:
        allow = self.kind == "allow"
        chained = f"@after:{','.join(self.after)}" if self.chained else None
        return JobSpec.build(
            self.name,
            chained or f"@every {self.interval_s}s",
            HANDLERS[self.kind],
            payload={"sleep_s": self.sleep_s} if self.sleep_s else {},
            catch_up=self.catch_up,
            grace=self.grace_s,
            max_backfill=self.max_backfill,
            timeout=RUN_TIMEOUT_S,
            retries=RETRIES,
            retry_backoff=EFFECTS_RETRY_BACKOFF_S if self.kind == "effects" else DEFAULT_BACKOFF_S,
            overlap="allow" if allow else "replace" if self.kind == "replace" else "forbid",
            max_concurrent=self.max_concurrent if allow else None,
            zones=self.zones or None,
            after=None if self.chained else self.after or None,
            after_failure="skip",  # a slot whose upstream failed is accounted for, skipped
            uses=self.uses or None,
        )


def make_workload(count: int, seed: int, zones: Sequence[str] = ()) -> list[JobDef]:
    """``count`` jobs, the same ones for the same seed, then the ``allow`` and ``replace``
    jobs and the jobs pinned to ``zones`` (none without zones)."""
    rng = random.Random(f"workload:{seed}")
    jobs = []
    for i in range(count):
        long = rng.random() < LONG_SHARE
        interval = rng.choice(LONG_INTERVALS_S if long else SHORT_INTERVALS_S)
        sleep_s = round(rng.uniform(6.0, 8.0), 1) if long else rng.choice((0.0, 0.0, 0.2, 0.5))
        policy = rng.choices(("once", "skip", "backfill"), weights=(4, 3, 3))[0]
        effects = i % EFFECTS_EVERY == EFFECTS_EVERY - 1 and not long
        kind = "effects" if effects else "witness"
        suffix = ("-long" if long else "") + ("-effects" if kind == "effects" else "")
        jobs.append(
            JobDef(
                name=f"chaos-{i:04d}{suffix}",
                interval_s=interval,
                catch_up=policy,
                grace_s=float(rng.choice((1, 2))) if policy == "skip" else 60.0,
                max_backfill=rng.randint(5, 20) if policy == "backfill" else 100,
                sleep_s=sleep_s,
                kind=kind,
            )
        )
    extra = allow_jobs() + replace_jobs() + pinned_jobs(zones) + dependent_jobs()
    return jobs + extra + keyed_jobs()


def keyed_jobs() -> list[JobDef]:
    return [
        JobDef(
            name=f"chaos-keyed-{i}",
            interval_s=1,
            catch_up="once",
            grace_s=60.0,
            max_backfill=100,
            sleep_s=KEYED_HOLD_S,
            kind="keyed",
            uses=(KEY,),
        )
        for i in range(KEYED_JOBS)
    ]


def allow_jobs() -> list[JobDef]:
    return [
        JobDef(
            name=f"chaos-allow-{i}",
            interval_s=1,
            catch_up="once",
            grace_s=60.0,
            max_backfill=100,
            sleep_s=ALLOW_HOLD_S,
            kind="allow",
            max_concurrent=ALLOW_MAX_CONCURRENT,
        )
        for i in range(ALLOW_JOBS)
    ]


def replace_jobs() -> list[JobDef]:
    return [
        JobDef(
            name=f"chaos-replace-{i}",
            interval_s=REPLACE_INTERVAL_S,
            catch_up="once",
            grace_s=60.0,
            max_backfill=100,
            sleep_s=REPLACE_HOLD_S,
            kind="replace",
        )
        for i in range(REPLACE_JOBS)
    ]


def pinned_jobs(zones: Sequence[str]) -> list[JobDef]:
    sets: list[tuple[str, ...]] = [(zone,) for zone in zones]
    if len(zones) == 2:
        sets.append((zones[0], zones[1]))
    elif len(zones) > 2:
        sets += [(zone, zones[(i + 1) % len(zones)]) for i, zone in enumerate(zones)]
    return [
        JobDef(
            name=f"chaos-pinned-{'-'.join(z.removeprefix('zone-') for z in pinned)}",
            interval_s=PINNED_INTERVAL_S,
            catch_up="backfill",
            grace_s=60.0,
            max_backfill=PINNED_MAX_BACKFILL,
            sleep_s=0.0,
            kind="pinned",
            zones=pinned,
        )
        for pinned in sets
    ]


def dependent_jobs() -> list[JobDef]:
    """A chain with a fan-in: ``up`` -> ``mid-1`` and ``mid-2`` -> ``down`` (after both)."""
    chain = {
        "chaos-dep-up": (),
        "chaos-dep-mid-1": ("chaos-dep-up",),
        "chaos-dep-mid-2": ("chaos-dep-up",),
        "chaos-dep-down": ("chaos-dep-mid-1", "chaos-dep-mid-2"),
    }
    chained = {"chaos-chain-1": ("chaos-dep-up",), "chaos-chain-2": ("chaos-chain-1",)}
    return [
        JobDef(
            name=name,
            interval_s=DEPENDENT_INTERVAL_S,
            catch_up="backfill",
            grace_s=60.0,
            max_backfill=100,
            sleep_s=DEPENDENT_SLEEP_S,
            kind="dependent",
            after=after,
            chained=name in chained,
        )
        for name, after in {**chain, **chained}.items()
    ]
