"""Recovery: takes back the slots of dead owners and expired leases in held shards.

It runs on every shard this node gains (before claiming there) and periodically over all
held shards. The reset is a compare-and-set in SQL on (running, lease token), so a run that
just finished is never overwritten; its slot becomes due again as the next attempt.

A lost attempt counts against the job's retries like a failed one. When the last attempt
the retries allow was lost, the slot is not run again: the statement hands it to this node,
which writes it as failed through the completer (the ``failed`` alert, auto-pause and the
next slot follow as for any failed slot). So a job that kills whatever node runs it (a
poison job) kills at most retries + 1 nodes per slot (tests/integration/test_poison.py).
A slot someone asked to cancel is handed over the same way and recorded ``cancelled``.

A node whose lock session was lost takes back, once the new session is open, the rows that
run under its node id while none of its runs holds their lease (``take_back_untracked``).
A statement whose answer was lost with the session (the network stalled after it ran, and
the node gave up waiting) can leave such rows: a claim, mostly. The node is alive all
along, so nobody's recovery of dead owners applies, and until this the slot waited for its
lease to expire (tests/integration/test_lost_answers.py). They are released as a shutdown
releases runs: due again at once, the lost attempt recorded.

The periodic pass (``poll``, every ``RECOVERY_INTERVAL_S`` of ``node.runtime``) reads
Postgres only when there may be something to take back: a member left the shard keeper's
alive set or the zone spaces changed since the last pass (a death), or ``IDLE_PASS_S``
passed (a lease that expired under a live owner). A quiet node pays two statements every
``IDLE_PASS_S`` rather than every beat (docs/design/beat.md).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any
from uuid import UUID

from cluster.settings import DEFAULT_LEASE_S
from cluster.store.lock.flights import FlightLease, RecoveredFlight
from cluster.store.lock.records import ClaimedJob, claimed_of
from cluster.store.lock.session import LockSession
from node.handlers.context import Outcome
from node.pipeline.completer import job_extra
from node.state import NodeState
from node.stats import Stats
from ring.zones import dark_shards

if TYPE_CHECKING:
    from node.handlers.traces import Tracing

logger = logging.getLogger(__name__)

# Where a poison slot's failure goes: the completer's ``run_done``.
FailSlot = Callable[[ClaimedJob, Outcome], None]
# The leases of every run this node tracks: jobs (id, token) and flights (id, slot, token).
Tracked = tuple[set[tuple[UUID, int]], set[FlightLease]]
# Between passes while no member died: bounds how late a lease that expired under a live
# owner (a node that could not renew) is taken back, after its lease.
IDLE_PASS_S = 10.0
ANSWER_LOST = "left running here by a statement whose answer was lost with its connection"


def poisoned(row: dict[str, Any]) -> ClaimedJob:
    """The slot ``recover`` handed over, as a claim of this node (its row starts as a
    claim's)."""
    return claimed_of(tuple(row.values()))


def lost_error(row: dict[str, Any]) -> str:
    """Why a poison slot failed: its last attempt went down with its node."""
    allowed = poisoned(row).retries + 1
    return (
        f"lost with its node on attempt {row['attempt']} of {allowed} "
        f"({row['reason']}, node {row['locked_by']}); retries exhausted, the slot is not run again"
    )


class Recovery:
    def __init__(
        self,
        state: NodeState,
        session: LockSession,
        stats: Stats,
        fail_slot: FailSlot | None = None,
        *,
        lease_s: float = DEFAULT_LEASE_S,
        flights_queued: Callable[[], None] = lambda: None,
        tracked: Callable[[], Tracked] = lambda: (set(), set()),
        tracing: Tracing | None = None,
    ) -> None:
        self._tracing = tracing  # with --otel: a lost attempt gets a span in its slot's trace
        self._flights_queued = flights_queued
        self._tracked = tracked
        self._state = state
        self._session = session
        self._stats = stats
        self._fail_slot = fail_slot
        self._lease_s = lease_s
        # What the last periodic pass saw (alive members, zone spaces) and when (monotonic).
        self._seen: tuple[frozenset[str], frozenset[int], float] | None = None

    async def recover(self, shards: frozenset[int]) -> int:
        """Take back the runs in ``shards`` of owners the shard keeper no longer counts
        as alive, and of expired leases."""
        alive = self._state.alive or (self._state.node_id,)
        rows = await self._session.recover(shards, alive, lease_s=self._lease_s)
        flights = await self._session.flights.recover(shards, alive, lease_s=self._lease_s)
        return self._took_back(rows) + self._flights_back(flights)

    async def recover_own(self) -> int:
        """Runs left by an earlier process of this node id (killed, restarted under the
        same id) look alive to everyone's recovery; take them back before claiming."""
        rows = await self._session.recover_own(lease_s=self._lease_s)
        flights = await self._session.flights.recover((), (), lease_s=self._lease_s, own=True)
        # Queued again in shards this node may not hold: their holders hear it.
        await self._session.notify_shards({f.job.shard for f in flights if not f.poison})
        return self._took_back(rows) + self._flights_back(flights)

    async def take_back_untracked(self) -> int:
        """Release the jobs and flights running under this node id that no run of this
        node holds (see the module docstring); returns how many."""
        jobs, flights = await self._session.held_runs()
        # Read after the answer: a claim answered before it is dispatched by now, and one
        # answered after it is not in it. A lease held here is never released.
        tracked_jobs, tracked_flights = self._tracked()
        lost_jobs = [lease for lease in jobs if lease not in tracked_jobs]
        lost_flights = [lease for lease in flights if lease not in tracked_flights]
        if not lost_jobs and not lost_flights:
            return 0
        released = len(await self._session.release(lost_jobs, ANSWER_LOST))
        released += len(await self._session.flights.release(lost_flights, ANSWER_LOST))
        logger.warning(
            "took back %d slots running under this node that none of its runs holds: %s",
            released,
            ANSWER_LOST,
            extra={"event": "untracked_runs_released"},
        )
        if released:
            self._stats.recovered += released
            self._state.wake.set()
            if lost_flights:
                self._flights_queued()
        return released

    def _flights_back(self, flights: list[RecoveredFlight]) -> int:
        """Flights are queued again (the claim loop takes them) or, poison, ended here."""
        for found in flights:
            job = found.job
            extra = job_extra(job, "run_recovered")
            if self._tracing is not None:
                lost = job.attempt if found.poison else job.attempt - 1
                self._tracing.lost(job, lost, found.lost_by, found.reason)
            if not found.poison:
                logger.warning(
                    "recovered flight from %s (%s); attempt %d is due now",
                    found.lost_by,
                    found.reason,
                    job.attempt,
                    extra=extra,
                )
                continue
            if job.cancel_by is not None:
                error = f"cancelled by {job.cancel_by}; lost with its node {found.lost_by}"
                outcome = Outcome("cancelled", error, 0.0)
            else:
                allowed = job.retries + 1
                error = (
                    f"lost with its node on attempt {job.attempt} of {allowed} ({found.reason}, "
                    f"node {found.lost_by}); retries exhausted, the slot is not run again"
                )
                outcome = Outcome("failed", error, 0.0)
            logger.error("flight lost for good: %s", error, extra={**extra, "event": "poison_slot"})
            if self._fail_slot is not None:
                self._fail_slot(job, outcome)
        if flights:
            self._stats.recovered += len(flights)
            self._flights_queued()
        return len(flights)

    def _took_back(self, rows: list[dict[str, Any]]) -> int:
        for row in rows:
            if self._tracing is not None:
                lost = row["attempt"] if row["poison"] else row["attempt"] - 1
                self._tracing.lost(poisoned(row), lost, row["locked_by"], row["reason"])
            extra = {
                "event": "run_recovered",
                "job": row["name"],
                "tenant": row["tenant_id"],
                "slot": row["slot_at"].isoformat(),
                "attempt": row["attempt"],
            }
            if row["poison"] and row["cancel_by"] is not None:
                logger.warning(
                    "slot lost with %s (%s) after it was asked to cancel: recorded cancelled",
                    row["locked_by"],
                    row["reason"],
                    extra={**extra, "event": "cancelled_slot_recovered"},
                )
                self._fail(row)
                continue
            if row["poison"]:
                logger.error(
                    "slot lost with %s (%s) on its last attempt %d: recorded failed",
                    row["locked_by"],
                    row["reason"],
                    row["attempt"],
                    extra={**extra, "event": "poison_slot"},
                )
                self._fail(row)
                continue
            logger.warning(
                "recovered slot from %s (%s); attempt %d is due now",
                row["locked_by"],
                row["reason"],
                row["attempt"],
                extra=extra,
            )
        if rows:
            self._stats.recovered += len(rows)
            self._state.wake.set()
        return len(rows)

    def _fail(self, row: dict[str, Any]) -> None:
        if self._fail_slot is None:
            # Without a completer (tests of recovery alone) the slot stays running under
            # this node until its lease expires; the next pass hands it over again.
            return
        if row["cancel_by"] is not None:
            error = f"cancelled by {row['cancel_by']}; lost with its node {row['locked_by']}"
            self._fail_slot(poisoned(row), Outcome("cancelled", error, 0.0))
            return
        self._fail_slot(poisoned(row), Outcome("failed", lost_error(row), 0.0))

    async def poll(self, clock: float | None = None) -> None:
        """The service's pass on each beat (``node.runtime``): ``run_once`` if a member left
        the alive set or the zone spaces changed since the last pass, or ``IDLE_PASS_S``
        passed (``clock``: ``time.monotonic()`` unless given)."""
        clock = time.monotonic() if clock is None else clock
        state, seen = self._state, self._seen
        alive, spaces = frozenset(state.alive), frozenset(state.spaces)
        quiet = seen is not None and seen[0] <= alive and seen[1] == spaces
        if quiet and seen is not None and clock < seen[2] + IDLE_PASS_S:
            return
        await self.run_once()
        if self._session.connected:  # else nothing was read: try again next beat
            self._seen = (alive, spaces, clock)

    async def run_once(self) -> None:
        if self._state.held and self._session.connected:
            await self.recover(self._state.held)
        dark = self._dark()
        if dark and self._session.connected:
            await self.recover(dark)

    def _dark(self) -> frozenset[int]:
        """Shards of zone spaces with no live node in their zones: nobody holds them, so
        a run left there by a dead zone is taken back here; its job stays unclaimed until
        a node of its zones returns, and the late pass reports its slot meanwhile. Only
        when every alive member's zone is known (docs/design/zones.md)."""
        state = self._state
        if (
            not state.spaces
            or state.node_id not in state.alive  # the shard keeper has not judged yet
            or any(m not in state.member_zones for m in state.alive)
        ):
            return frozenset()
        zones = {m: state.member_zones[m] for m in state.alive}
        return dark_shards({**zones, state.node_id: state.zone}, state.spaces)
