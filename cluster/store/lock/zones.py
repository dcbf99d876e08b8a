"""The zone statements of the lock session: zone spaces (the shard numbers of a zone set,
docs/design/zones.md) and the children of each-zone jobs, one per zone with a live node.
``Zones`` is a part of ``LockSession``, run on its connection as the job statements are:
the shard keeper reads the spaces it may lock there, and the each-zone keeper
(``node.membership.eachzone``) writes the children of the zones it serves.
"""

from __future__ import annotations

from collections.abc import Awaitable, Sequence
from datetime import datetime
from typing import Any, Protocol
from uuid import UUID

from psycopg.rows import AsyncRowFactory, dict_row


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
