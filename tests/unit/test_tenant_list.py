"""The fair claim's tenant list (cluster/store/lock/tenantlist.py): walked once and kept
between claims, walked again when it is older than its age limit, when the held shards
change, or for another explicit ``now``."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from psycopg.rows import AsyncRowFactory

from cluster.store.lock.tenantlist import TenantList

T0 = datetime(2026, 1, 1, tzinfo=UTC)


class Walks:
    """A lock session that answers the walk with a new list each time, and counts walks."""

    def __init__(self) -> None:
        self.params: list[dict[str, Any]] = []

    async def __call__(
        self, name: str, params: dict[str, Any], rows: AsyncRowFactory[Any] | None = None, /
    ) -> list[Any]:
        assert name == "fair_tenants"
        self.params.append(params)
        n = len(self.params)
        return [(f"{{{n}}}", f"{{t{n}}}", "{2026-01-01 00:00:00+00}")]


async def test_the_list_is_kept_between_claims() -> None:
    walks = Walks()
    tenants = TenantList(walks, max_age_s=3600)
    first = await tenants.pairs([1, 2], None, 0.1)
    assert await tenants.pairs([2, 1], None, 0.1) == first == {
        "pair_shards": "{1}", "pair_tenants": "{t1}", "pair_oldest": "{2026-01-01 00:00:00+00}"
    }  # fmt: skip
    assert walks.params == [{"shards": [1, 2], "now": None, "horizon_s": 3600.1}]


async def test_the_list_is_walked_again_for_other_shards_or_another_now() -> None:
    walks = Walks()
    tenants = TenantList(walks, max_age_s=3600)
    await tenants.pairs([1, 2], None, 0.0)
    assert (await tenants.pairs([1], None, 0.0))["pair_shards"] == "{2}"
    assert (await tenants.pairs([1], T0, 0.0))["pair_shards"] == "{3}"
    assert (await tenants.pairs([1], T0, 0.0))["pair_shards"] == "{3}"
    assert [p["shards"] for p in walks.params] == [[1, 2], [1], [1]]


async def test_an_old_list_is_walked_again() -> None:
    walks = Walks()
    tenants = TenantList(walks, max_age_s=0.0)
    await tenants.pairs([1], None, 0.0)
    await tenants.pairs([1], None, 0.0)
    assert len(walks.params) == 2
