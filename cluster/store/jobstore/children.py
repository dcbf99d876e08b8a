"""An each-zone job's children follow what is done to their parent, in the same transaction.

The parent of an ``--each-zone`` job never runs: one child per zone runs its slots
(docs/zones.md). An apply or rollback that gives the parent a new timing, a pause, a resume,
a ``pause --until`` and a ``skip-next`` act on each existing child as on a job of its own,
with the records the slot ledger asks of each (docs/guarantees.md): the old timing's slots
an overdue child is moved past, or that came while its slot ran, recorded skipped
(``dropped``); a running child's completion going on to the slot the new timing planned
(``timing_slot``); the slots a child owes recorded before it pauses. Moving the children
later, from the nodes' each-zone keeper, recorded nothing and left a running child on its
old timing (docs/design/zones.md, "Children follow their parent in its transaction"). A
child its parent no longer wants (an ordinary job again, without its zone, removed) goes
in the same transaction (``release``). The keeper (node/membership/eachzone.py) still
creates a zone's child and finds these in line.
A part of ``JobStore``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from cluster.jobs.spec import OPTIONS
from cluster.store.connect import Row
from cluster.store.jobstore import bulk, dropped
from cluster.store.jobstore.holds import open_run
from cluster.store.jobstore.replanning import owes
from cluster.store.jobstore.scoped import ScopedConnection
from cluster.store.lock.zones import child_plan
from cluster.timing.calendared import Decision
from cluster.timing.jitter import jittered
from cluster.timing.schedule import parse_schedule

__all__ = ["Children"]


class Children:
    def __init__(self, db: ScopedConnection) -> None:
        self._db = db

    async def follow(self, parents: Sequence[Row], now: datetime, by: str) -> set[int]:
        """Bring the existing children of ``parents`` (each-zone jobs as an apply just wrote
        them) in line with them; the shards of those written. A timing change moves an idle
        child to its new timing's next slot after ``now`` (past the slots that have a record
        already: ``open_run``) and records skipped the old timing's slots due by then, as an
        apply does for a job of its own (``by`` names who moved it); a running child keeps
        its slot and goes on to that slot when it ends."""
        if not parents:
            return set()
        by_id = {parent["id"]: parent for parent in parents}
        found = {
            (row["tenant_id"], row["name"]): row
            for row in await self._db.all("lock_children", {"ids": list(by_id)})
        }
        planned = {key: _params(by_id[row["parent_id"]], row, now) for key, row in found.items()}
        await self._past_records(by_id, found, planned, now)
        owed = dropped.owed(planned, found, now)

        async def write() -> dict[bulk.Key, Row]:
            written = {}
            for key, params in planned.items():
                row = await self._db.one("upsert_zone_child", params)
                if row is not None:
                    written[key] = row
            return written

        if owed and not await self._db.writes_runs():
            # A login that writes no past runs records them before the children move.
            probed = await bulk.rolled_back(self._db, write)
            await dropped.record_moved(self._db, owed, found, probed, now, by)
            owed = []
        written = await write()
        await dropped.record_moved(self._db, owed, found, written, now, by)
        return {row["shard_id"] for row in written.values()}

    async def release(self, ids: Sequence[Any]) -> None:
        """Remove the children of ``ids`` (each-zone jobs as they stood before an apply
        changed or removed them) that their parent no longer wants, an ordinary job now or
        without their zone, with their history (``release_children``), in the operator's
        transaction. Left to the nodes' keeper, a child ran on for up to its pass, the slots
        its parent, an ordinary job again, ran too."""
        if ids:
            await self._db.all("release_children", {"ids": list(ids)})

    async def _past_records(
        self,
        parents: Mapping[Any, Row],
        found: Mapping[bulk.Key, Row],
        planned: Mapping[bulk.Key, dict[str, Any]],
        now: datetime,
    ) -> None:
        """A child the new definition moves starts past the slots that have a record already
        (a ``skip-next`` of its parent writes them ahead), as a job of its own does
        (``Replanning.past_records``): ``planned`` is changed in place."""
        moved = [
            key
            for key, row in found.items()
            if _moves(parents[row["parent_id"]], row)
            and not (row["attempt"] > 1 and owes(row, now))  # kept for its retry: recorded
        ]
        slots = [(found[key]["id"], planned[key]["slot_at"]) for key in moved]
        recorded = await bulk.recorded_from(self._db, slots)
        for key in moved:
            child, params = found[key], planned[key]
            if child["id"] not in recorded:
                continue
            parent = parents[child["parent_id"]]
            schedule = parse_schedule(
                parent["schedule"], parent["tz"], parent["dst_repeated"], parent["dst_skipped"]
            )
            slot = params["slot_at"]
            run = await open_run(
                self._db, child["id"], schedule, None, Decision(slot, slot, True), now
            )
            params["slot_at"] = run.slot
            params["next_run_at"] = jittered(
                child["tenant_id"], child["name"], run.slot, parent["jitter_s"]
            )


def _moves(parent: Mapping[str, Any], child: Mapping[str, Any]) -> bool:
    """Whether writing ``parent``'s definition over ``child`` moves it to a new slot, as
    ``upsert_zone_child`` decides: its timing changes, or it is resumed."""
    timing = OPTIONS.columns["child_timing"]
    return any(parent[c] != child[c] for c in timing) or (child["paused"] and not parent["paused"])


def _params(parent: Mapping[str, Any], child: Mapping[str, Any], now: datetime) -> dict[str, Any]:
    """``upsert_zone_child``'s parameters for an existing ``child`` of ``parent``. A child
    that owes its slot (its time come, not its start: a retry waits, or its jitter) keeps
    it and its start, as a job of its own does (``owes``)."""
    zone = child["zones"][0]
    if owes(child, now):
        slot, start = child["slot_at"], child["next_run_at"]
    else:
        slot, start = child_plan(parent, zone, now, child["paused_until"])
    return {
        "parent_id": parent["id"],
        "zone": zone,
        "id": child["id"],
        "shard_id": child["shard_id"],
        "slot_at": slot,
        "next_run_at": start,
    }
