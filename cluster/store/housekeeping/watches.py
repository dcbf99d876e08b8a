"""Watch jobs in the store: their ping tokens, the runs their pings write, the late pass
over the watch shard, and adoption (docs/design/watch.md).

A watch job lives in ``WATCH_SHARD``, which no node locks, so it is never claimed and the
claim pays nothing for it. Its ``slot_at`` is the slot it awaits a ping for: a ping for
that slot (``record_ping``) or the late pass declaring it missed (``watch_pass``) moves it
to the next run of its schedule, and at the adoption slot hands it to the nodes. The token
is shown once; only its sha256 is stored.

No wait is unbounded: a run a ``/start`` opened and no end ping closed within the job's
``timeout`` is recorded ``timed_out`` with a ``failed`` alert (``watch_timeouts``, by the
late pass of any node, or by the late end ping itself), once; the late end ping is then
noted on that run, never filed under another slot (tests/integration/test_watch_timeout.py).
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import secrets
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

from psycopg.types.json import Jsonb

from cluster.errors import InvalidInput, NotFound
from cluster.jobs import pingbodies
from cluster.jobs.models import Job
from cluster.store.side import Fetch
from cluster.timing.instants import US
from cluster.timing.runs import first_run
from cluster.timing.watching import after_slot, late_slots, ping_run
from ring import shard_for
from ring.zones import WATCH_SHARD

logger = logging.getLogger(__name__)

PING_KINDS = ("start", "success", "fail")
TOKEN_BYTES = 32
# Watch jobs one pass declares missed, at most (the rest wait for the next pass).
PASS_LIMIT = 100
# Slots of one job one pass catches up on, at most.
PASS_SLOTS = 100
# Watched runs one pass times out, at most.
TIMEOUT_LIMIT = 100


def new_token() -> str:
    """A ping token: 256 random bits, URL-safe (43 characters)."""
    return secrets.token_urlsafe(TOKEN_BYTES)


def token_hash(token: str) -> bytes:
    """What the database keeps of a token. Any text hashes, so a malformed token costs the
    same lookup as a well-formed unknown one."""
    return hashlib.sha256(token.encode("utf-8", "replace")).digest()


@dataclass(frozen=True)
class Ping:
    # recorded | double_run | late (noted on its slot's terminal record: timed out,
    # cancelled, declared missed or ended already)
    outcome: str
    job: Job
    slot: datetime


@dataclass(frozen=True)
class TimedOut:
    """A watched run the late pass recorded ``timed_out``."""

    tenant: str
    job_name: str
    slot: datetime


async def _one(fetch: Fetch, name: str, params: dict[str, Any]) -> dict[str, Any] | None:
    rows = await fetch(name, params)
    return rows[0] if rows else None


async def record_ping(
    fetch: Fetch,
    token: str,
    kind: str,
    *,
    body: bytes,
    shards: int,
    now: datetime,
) -> Ping | None:
    """Write what a ping of ``kind`` says, in the caller's transaction; None for a token no
    job has (the caller answers as for a malformed one)."""
    if kind not in PING_KINDS:
        raise InvalidInput("kind", f"must be one of {', '.join(PING_KINDS)}")
    hashed = token_hash(token)
    row = await _one(fetch, "watch_by_hash", {"hash": hashed})
    if row is None:
        return None
    job = Job.from_row(row)
    # a body of up to 1 MiB, scrubbed off the event loop
    kept = await asyncio.to_thread(pingbodies.kept, body, token, job.output_limit)
    output = None if kept is None else Jsonb({"stdout": kept})
    error = "the ping said it failed" if kind == "fail" else None
    if kind != "start" and row["ping_open"] is not None:  # the end of what a /start opened
        params = {"hash": hashed, "slot": row["ping_open"], "kind": kind, "at": now,
                  "output": output, "error": error}  # fmt: skip
        ended = await _one(fetch, "watch_end", params)
        if ended is not None and ended["outcome"] is not None:
            await fetch("watch_open", {"id": job.id, "slot": None})
            return Ping(str(ended["outcome"]), job, row["ping_open"])
    run = ping_run(job.parsed_schedule(), job.rule(), now)
    if run is None:
        raise InvalidInput("ping", "the job's schedule has no slot this early")
    slot = run.slot
    late = None
    late_s = (now - run.start).total_seconds()
    if job.watch and slot == job.slot_at and late_s > job.late_after_s:
        late = f"pinged {late_s:.0f}s after it was due (late after {job.late_after_s:g}s)"
    found = await _one(
        fetch,
        "watch_record",
        {
            "hash": hashed,
            "slot": slot,
            "kind": kind,
            "started_at": now if kind == "start" else None,
            "finished_at": now,
            "output": output,
            "error": error,
            "late": late,
        },
    )
    outcome = None if found is None else found["outcome"]
    if outcome is None:
        return None
    if outcome == "recorded" and (kind == "start" or row["ping_open"] is not None):
        await fetch("watch_open", {"id": job.id, "slot": slot if kind == "start" else None})
    if outcome == "recorded" and job.watch and slot == job.slot_at:
        await _advance(fetch, job, slot, shards, late=late is not None, now=now)
    return Ping(str(outcome), job, slot)


async def _advance(
    fetch: Fetch, job: Job, slot: datetime, shards: int, *, late: bool, now: datetime | None
) -> None:
    """The job awaits the run after ``slot``; from its adoption slot, Pulse runs it."""
    nxt = after_slot(job.parsed_schedule(), job.rule(), slot)
    adopt = job.adopt_at is not None and nxt.slot >= job.adopt_at
    await fetch(
        "watch_advance",
        {
            "id": job.id,
            "slot": slot,
            "next_start": nxt.start,
            "next_slot": nxt.slot,
            "late": late,
            "adopt": adopt,
            "home_shard": shard_for(job.id, shards),
            "now": now,
        },
    )
    if adopt:
        logger.info(
            "watch job adopted: Pulse runs it from %s",
            nxt.slot.isoformat(),
            extra={"event": "watch_adopted", "job": job.name, "tenant": job.tenant},
        )


async def _hand_over(
    fetch: Fetch, job: Job, slot: datetime, start: datetime, shards: int, now: datetime | None
) -> None:
    """The watch job, awaiting ``slot`` (due at ``start``), becomes a job Pulse runs from it."""
    params = {
        "id": job.id, "slot": slot, "next_start": start, "next_slot": slot, "late": False,
        "adopt": True, "home_shard": shard_for(job.id, shards), "now": now,
    }  # fmt: skip
    await fetch("watch_advance", params)


async def watch_pass(fetch: Fetch, shards: int, now: datetime | None = None) -> list[Job]:
    """Declare missed each awaited slot no ping came for within its job's late_after_s: a
    failed run in its history and one ``late`` event, then the job awaits its next run;
    a job behind by several slots catches up in one pass (at most ``PASS_SLOTS``), passing
    the slots a ping already recorded. An adopted job awaiting a slot Pulse runs is handed
    over once that slot is due. Run in one transaction; returns one job per slot declared
    missed (its ``slot_at`` that slot)."""
    at = now if now is not None else (await fetch("db_now", {"now": None}))[0]["now"]
    missed = []
    rows = await fetch(
        "watch_overdue", {"watch_shard": WATCH_SHARD, "now": at, "limit": PASS_LIMIT}
    )
    for row in rows:
        job = Job.from_row(row)
        start = job.next_run_at or job.slot_at
        walk = late_slots(
            job.parsed_schedule(), job.rule(), job.slot_at, start, job.late_after_s,
            job.adopt_at, at, PASS_SLOTS,
        )  # fmt: skip
        for slot in walk.late:
            seen = await _one(fetch, "watch_slot_seen", {"id": job.id, "slot": slot})
            if not (seen and seen["seen"]):
                error = f"no ping within {job.late_after_s:g}s of the slot (watch job)"
                await fetch("watch_missed", {"id": job.id, "slot": slot, "error": error, "now": at})
                missed.append(replace(job, slot_at=slot))
            await _advance(fetch, replace(job, slot_at=slot), slot, shards, late=True, now=at)
        if job.adopt_at is not None and walk.slot >= job.adopt_at:
            # Moved past its adoption slot (a resume, skip-next, a new timing...), or caught
            # up to it by this pass: Pulse's from this slot on.
            await _hand_over(fetch, job, walk.slot, walk.start, shards, at)
    return missed


async def watch_timeouts(fetch: Fetch, now: datetime | None = None) -> list[TimedOut]:
    """Record ``timed_out``, with one ``failed`` event each, the watched runs whose end ping
    did not come within their job's timeout (at most ``TIMEOUT_LIMIT``; the rest wait for
    the next pass). Once per run however many passes run at the same time."""
    params = {"now": now, "limit": TIMEOUT_LIMIT}
    return [
        TimedOut(r["tenant_id"], r["job_name"], r["slot"])
        for r in await fetch("watch_timeouts", params)
    ]


async def cancel_runs(
    fetch: Fetch, name: str, tenant: str, *, scope: str | None, slot: datetime | None, by: str
) -> list[datetime]:
    """Record the watch job's running runs (the one of ``slot``, else each) ``cancelled``
    by ``by``; their slots. Pulse does not run their process, so it cannot stop it."""
    params = {"tenant_id": tenant, "name": name, "scope": scope, "slot": slot, "by": by}
    return [r["slot"] for r in await fetch("watch_cancel", params)]


async def adopt(
    fetch: Fetch,
    name: str,
    tenant: str,
    *,
    at: datetime,
    handler: str | None,
    scope: str | None,
    shards: int,
    now: datetime,
) -> Job:
    """From the slot ``at`` on, Pulse runs the watch job (with ``handler``, or the one it
    has); the slots before stay watched. ``at`` must be a slot of the job, not before the
    slot it awaits, and in the future."""
    row = await _one(fetch, "lock_job", {"tenant_id": tenant, "name": name, "scope": scope})
    if row is None:
        raise NotFound(f"no job named {name!r} in tenant {tenant!r}")
    job = Job.from_row(row)
    if not job.watch:
        raise InvalidInput("name", f"{name!r} is not a watch job")
    if not (handler or job.handler):
        raise InvalidInput("handler", "a watch job needs a handler to be adopted: --handler")
    run = first_run(job.parsed_schedule(), job.rule(), at - US)
    if run.slot != at:
        raise InvalidInput("at", f"{at.isoformat()} is not a slot of the job's schedule")
    if at <= now:
        raise InvalidInput("at", "must be a slot in the future")
    if at < job.slot_at:
        raise InvalidInput(
            "at", f"the job already awaits the slot {job.slot_at.isoformat()}; adopt from it on"
        )
    params = {"tenant_id": tenant, "name": name, "scope": scope, "at": at, "handler": handler}
    await fetch("watch_adopt", params)
    if at == job.slot_at:  # the slot it awaits: Pulse's from now on
        await _hand_over(fetch, job, at, run.start, shards, now)
    found = await _one(fetch, "get_job", {"tenant_id": tenant, "name": name, "scope": scope})
    assert found is not None
    return Job.from_row(found)


async def issue_token(
    fetch: Fetch, name: str, tenant: str, *, scope: str | None, rotate: bool
) -> str:
    """A new ping token for the watch (or adopted) job: its first, or with ``rotate`` one
    that replaces the old (which stops working at once). Without ``rotate``, a job that has
    one already is refused: only its hash is kept, so it cannot be shown again."""
    row = await _one(fetch, "get_job", {"tenant_id": tenant, "name": name, "scope": scope})
    if row is None:
        raise NotFound(f"no job named {name!r} in tenant {tenant!r}")
    if not (row["watch"] or row["adopt_at"] is not None):
        raise InvalidInput("name", f"{name!r} is not a watch job")
    token = new_token()
    params = {
        "tenant_id": tenant, "name": name, "scope": scope, "rotate": rotate,
        "hash": token_hash(token),
    }  # fmt: skip
    if await _one(fetch, "watch_set_token", params) is None:
        raise InvalidInput(
            "rotate",
            "the job's ping URL was shown when it was made and is kept only as a hash; "
            "--rotate makes a new one (the old one stops working)",
        )
    return token


async def place(fetch: Fetch, watch: bool, job: dict[str, Any], inserted: bool) -> bool:
    """Put a new watch job in the watch shard (True if it moved); refuse a definition that
    would turn a job into a watch job or back: adoption does that, at a slot boundary."""
    if watch and not job["watch"]:
        if job["adopt_at"] is not None:
            raise InvalidInput(
                "watch",
                f"{job['name']!r} was adopted (Pulse runs it since "
                f"{job['adopt_at'].isoformat()}): drop `watch: true` from its definition",
            )
        if not inserted:
            raise InvalidInput(
                "watch", f"{job['name']!r} exists as a job Pulse runs; remove it to watch it"
            )
        params = {"tenant_id": job["tenant_id"], "name": job["name"], "watch_shard": WATCH_SHARD}
        return await _one(fetch, "watch_place", params) is not None
    if not watch and job["watch"]:
        raise InvalidInput(
            "watch", f"{job['name']!r} is a watch job: `pulse jobs adopt` makes Pulse run it"
        )
    return False
