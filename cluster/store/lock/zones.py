"""The zone statements of the lock session: zone spaces (the shard numbers of a zone set,
docs/design/zones.md) and the children of each-zone jobs, one per zone with a live node.
``Zones`` is a part of ``LockSession``, run on its connection as the job statements are:
the shard keeper reads the spaces it may lock there, and the each-zone keeper
(``node.membership.eachzone``) writes the children of the zones it serves. ``child_plan``
is where a child goes when it is written: the job store plans its children with it too,
when an operator's action on their parent moves them (cluster/store/jobstore/children.py).
"""

from __future__ import annotations

from collections.abc import Awaitable, Mapping, Sequence
from datetime import datetime
from typing import Any, Protocol
from uuid import UUID

from psycopg.rows import AsyncRowFactory, dict_row

from cluster.timing.jitter import jittered
from cluster.timing.runs import planned_from
from cluster.timing.schedule import parse_schedule


def child_plan(
    parent: Mapping[str, Any], zone: str, now: datetime, paused_until: datetime | None
) -> tuple[datetime, datetime]:
    """The next slot of the each-zone job ``parent`` (its row) for its child in ``zone``
    planned at ``now``, and that slot's start, jittered by the child's own name: after
    ``now``, or after a ``pause --until`` still holding it (``paused_until``)."""
    schedule = parse_schedule(
        parent["schedule"], parent["tz"], parent["dst_repeated"], parent["dst_skipped"]
    )
    slot = schedule.next_after(planned_from(paused_until, now))
    name = f"{parent['name']}@{zone}"
    return slot, jittered(parent["tenant_id"], name, slot, parent["jitter_s"])


class Rows(Protocol):
    """Runs a named statement on the lock session, within its deadline; its rows as tuples
    unless ``rows`` says otherwise (``LockSession._run``)."""

    def __call__(
        self, name: str, params: dict[str, Any], rows: AsyncRowFactory[Any] = ..., /
    ) -> Awaitable[list[Any]]: ...


class Zones:
    """``run``: runs a statement on the lock session, within its deadline."""

    def __init__(self, run: Rows) -> None:
        self._run = run

    async def zone_spaces(self) -> dict[int, tuple[str, ...]]:
        """Every zone space and its zone set (docs/design/zones.md)."""
        rows = await self._run("zone_spaces", {})
        return {int(space): tuple(zones) for space, zones in rows}

    async def zone_space(self, zones: Sequence[str]) -> int:
        """The space number of a zone set, allocated on first use."""
        while True:  # no row: a concurrent first use of the set, committed by now
            rows = await self._run("zone_space", {"zones": list(zones)})
            if rows:
                return int(rows[0][0])

    async def each_zone_parents(self, zone: str) -> list[dict[str, Any]]:
        """The each-zone jobs that want a child in ``zone``."""
        return await self._run("each_zone_parents", {"zone": zone}, dict_row)

    async def upsert_zone_child(
        self,
        parent_id: UUID,
        zone: str,
        child_id: UUID,
        shard: int,
        slot: datetime,
        start: datetime,
    ) -> bool:
        """Create the parent's child for ``zone`` or align its definition, its next slot
        ``slot`` starting at ``start``; True if written."""
        params = {
            "parent_id": parent_id,
            "zone": zone,
            "id": child_id,
            "shard_id": shard,
            "slot_at": slot,
            "next_run_at": start,
        }
        return bool(await self._run("upsert_zone_child", params))

    async def zone_children(self) -> list[dict[str, Any]]:
        return await self._run("zone_children", {}, dict_row)

    async def remove_zone_children(self, ids: Sequence[UUID]) -> list[str]:
        rows = await self._run("remove_zone_children", {"ids": list(ids)})
        return [row[1] for row in rows]
