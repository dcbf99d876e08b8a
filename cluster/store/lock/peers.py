"""The peers' lock sessions, as the lock session sees them in ``pg_stat_activity``: which
members have one, how long each has idled, and ending the idle session of a member judged
frozen or stalled (docs/design/lock-session.md, docs/design/recovery.md). ``Peers`` is a
part of ``LockSession``, run on its connection as the zone statements are: the shard
keeper (``node.membership.liveness``) asks it when it judges its members.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

from cluster.store.lock.zones import Rows

Ending = Literal["ended", "gone", "used"]


class Peers:
    """``run``: runs a statement on the lock session, within its deadline."""

    def __init__(self, run: Rows) -> None:
        self._run = run

    async def live_sessions(self, node_ids: Sequence[str]) -> set[str]:
        """The given nodes with a lock session in this database."""
        return set(await self.member_sessions(node_ids))

    async def member_sessions(self, node_ids: Sequence[str]) -> dict[str, float]:
        """The given nodes with a lock session in this database -> seconds it has idled."""
        rows = await self._run("member_sessions", {"ids": list(node_ids)})
        return {row[0]: float(row[1]) for row in rows}

    async def end_frozen_session(self, node_id: str, idle_s: float) -> Ending:
        """End ``node_id``'s lock session if it has idled longer than ``idle_s``, and its
        other connections' open transactions with it: ``ended``; ``gone`` if it had no
        session left to end, ``used`` if its session ran a statement meanwhile."""
        rows = await self._run("end_frozen_session", {"node": node_id, "idle_s": idle_s})
        ended, _, gone = rows[0]
        return "ended" if ended else "gone" if gone else "used"
