"""The tenant list of the fair claim: which tenants have jobs in each held shard, and each
one's oldest due time there, kept between claims (docs/design/fairness.md).

Finding them is a loose index scan of ``jobs_tenant_due``, one index descent per tenant of
every held shard. A fair claim used to walk it on every claim of a backlog, which is when
claims come fastest: a backlog of one-off jobs cost 1.86x the Postgres CPU of the same
drain without fairness. The list is now walked at most once every ``MAX_AGE_S`` while claims
go fair, and on a change of the held shards; each fair claim gets it as parameters and
reads only the pairs it picks. ``TenantList`` is a part of ``LockSession``, run on its
connection as the claim is.

A pair's oldest due time only ever moves later as its jobs run, so an old list at worst
sends a claim to a shard whose tenant has run dry there: one index probe that finds
nothing. What an old list can miss is a tenant whose first job arrived after the walk. A
write to a held shard NOTIFYs its holder, whose claim loop then has the list walked again
(``forget``); should the notification be lost, those of the tenant's jobs among their
shard's oldest (the heads) take their turns as before, and the others wait for up to
``MAX_AGE_S`` more, claimed oldest first meanwhile.
"""

from __future__ import annotations

import time
from collections.abc import Collection
from datetime import datetime
from typing import Any

from cluster.store.lock.zones import Rows

MAX_AGE_S = 1.0

# The pairs travel as Postgres array literals, as the walk formatted them (claim.sql).
NO_PAIRS: dict[str, Any] = {"pair_shards": "{}", "pair_tenants": "{}", "pair_oldest": "{}"}


class TenantList:
    """``run``: runs a statement on the lock session, within its deadline."""

    def __init__(self, run: Rows, max_age_s: float = MAX_AGE_S) -> None:
        self._run = run
        self.max_age_s = max_age_s
        self._key: tuple[frozenset[int], datetime | None] | None = None
        self._walked_at = 0.0  # monotonic
        self._pairs: dict[str, Any] = NO_PAIRS

    async def pairs(
        self, shards: Collection[int], now: datetime | None, ahead_s: float
    ) -> dict[str, Any]:
        """The fair claim's ``pair_*`` parameters for ``shards``: the kept list, walked
        again if it is older than ``MAX_AGE_S``, of other shards, or of another explicit
        ``now`` (a test's clock, which a monotonic age does not follow)."""
        key = (frozenset(shards), now)
        if key != self._key or time.monotonic() - self._walked_at >= self.max_age_s:
            params = {
                "shards": sorted(key[0]),
                "now": now,
                # Pairs that fall due before the next walk, in a claim that reads ahead.
                "horizon_s": ahead_s + self.max_age_s,
            }
            at, tenants, oldest = (await self._run("fair_tenants", params))[0]
            self._pairs = {"pair_shards": at, "pair_tenants": tenants, "pair_oldest": oldest}
            self._key, self._walked_at = key, time.monotonic()
        return self._pairs

    def forget(self) -> None:
        """Walk again at the next fair claim: a job was written in a held shard, perhaps a
        tenant's first there (the claim loop hears it by NOTIFY)."""
        self._key = None
