"""The statements that write run outcomes, each fenced by its lease token: ``complete`` (job
slots), ``complete_flights`` (attempts of overlap ``allow`` flights) and ``spawn`` (an
``allow`` claim handed to its flight); docs/design/completions.md.

``Completions`` is a part of the connection that runs them: the result writer's in a node,
the lock session's too, so tests can hand the completer a lock session's completions.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from uuid import UUID

from cluster.store.deadline import Statement
from cluster.store.lock.records import (
    Completion,
    Skip,
    complete_params,
    finished_one_offs,
    flight_params,
    spawn_params,
)


class Completions:
    """``run``: runs a statement on the owning connection, within its deadline; ``node_id``
    and ``zone``: the node's, written into the run rows."""

    def __init__(self, run: Statement, node_id: str, zone: str) -> None:
        self._run = run
        self.node_id = node_id
        self.zone = zone

    async def complete(
        self,
        done: Sequence[Completion],
        skips: Sequence[Skip] = (),
        now: datetime | None = None,
    ) -> set[UUID]:
        """Apply completions; returns the ids applied (the rest were fenced)."""
        if not done:
            return set()
        rows = await self._run(
            "complete", complete_params(done, skips, self.node_id, self.zone, now)
        )
        applied = {row[0] for row in rows}
        finished = finished_one_offs(done, applied)
        if finished:  # rare: a one-off job is done; remove it if it asked to be
            await self._run("remove_done_jobs", {"ids": finished})
        return applied

    async def complete_flights(
        self, done: Sequence[Completion], now: datetime | None = None
    ) -> set[tuple[UUID, datetime]]:
        """Apply flight completions; returns the (job id, slot) pairs applied."""
        if not done:
            return set()
        rows = await self._run(
            "complete_flights", flight_params(done, self.node_id, self.zone, now)
        )
        return {(row[0], row[1]) for row in rows}

    async def spawn(
        self,
        spawns: Sequence[Completion],
        skips: Sequence[Skip],
        lease_s: float,
        now: datetime | None = None,
        members: Sequence[tuple[str, str | None]] = (),
    ) -> dict[UUID, bool]:
        """Hand claimed `allow` slots to flights, and fan each-node slots out to ``members``
        (live, with their zones); each job moved, and whether a run of it starts here."""
        if not spawns:
            return {}
        params = spawn_params(spawns, skips, self.node_id, self.zone, lease_s, now, members)
        return {row[0]: row[1] for row in await self._run("spawn", params)}
