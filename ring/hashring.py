"""The consistent-hash ring over live members: which member should own a shard.

Every node builds its own ``Ring`` from the live member list it read from Redis,
and all of them must derive the same shard map without talking to each other.
So the map depends only on the *set* of member ids: members are sorted and
de-duplicated, the vnode count and weights are fixed here rather than taken
from uhashring's defaults, and ring points come from our own pinned MD5 (never
the per-process salted ``hash()``).

This module is also the one typed facade over uhashring, which ships no type
hints; nothing else in Pulse imports it. We use its plain (non-ketama) ring: a
member's points depend only on its own id, so a join or a leave moves only
about 1/N of the shards, all to or from the member that changed.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable

from uhashring import HashRing

from ring.shards import validate_shard_count

# Points per member on the ring. Fixed, and part of the cluster contract: nodes built
# with different values would disagree about owners. The arc-length spread goes as
# 1/sqrt(vnodes); see docs/design/membership.md. Guarded by tests/unit/test_ring.py.
VNODES = 512
_WEIGHT = 1


def _point(key: str) -> int:
    """Ring position of ``key``: MD5 as a 128-bit unsigned int.

    The same function uhashring uses by default, pinned here so an upstream
    change cannot move shards; ``usedforsecurity=False`` keeps it working on
    FIPS-mode hosts, where a plain ``md5()`` is refused.
    """
    return int.from_bytes(hashlib.md5(key.encode("utf-8"), usedforsecurity=False).digest(), "big")


def _shard_key(shard: int) -> str:
    return f"shard-{shard}"


class Ring:
    """An immutable consistent-hash ring over a set of member ids.

    Build a new ``Ring`` whenever membership changes; the assignment for a
    given shard count is computed once per instance and then served from cache.
    """

    __slots__ = ("_assignments", "_hashring", "_members")

    def __init__(self, members: Iterable[str]) -> None:
        if isinstance(members, str):
            # A bare string is iterable too, and would make a ring of its letters.
            raise TypeError("members must be an iterable of member ids, not a single str")
        unique = set(members)
        for member in unique:
            if not isinstance(member, str) or not member:
                raise ValueError(f"member ids must be non-empty strings, got {member!r}")
        self._members: tuple[str, ...] = tuple(sorted(unique))
        # Insertion order is the sorted order, so even a (2**-128) point
        # collision between two members resolves the same way on every node.
        nodes = {member: {"vnodes": VNODES, "weight": _WEIGHT} for member in self._members}
        self._hashring = HashRing(nodes, vnodes=VNODES, hash_fn=_point)
        self._assignments: dict[int, dict[str, frozenset[int]]] = {}

    @property
    def members(self) -> tuple[str, ...]:
        """The member ids, sorted, without duplicates."""
        return self._members

    def owner(self, shard: int) -> str | None:
        """The member that should own ``shard``, or None if there are no members."""
        if shard < 0:
            raise ValueError(f"shard must be >= 0, got {shard}")
        if not self._members:
            return None
        node = self._hashring.get_node(_shard_key(shard))
        if not isinstance(node, str):  # pragma: no cover - uhashring contract
            raise RuntimeError(f"uhashring returned {node!r} for shard {shard}")
        return node

    def assignment(self, shard_count: int) -> dict[str, frozenset[int]]:
        """Every member mapped to the shards it should own, out of ``shard_count``.

        Each shard appears under exactly one member (none if the ring is
        empty); every member is a key, possibly with an empty set.
        """
        return dict(self._cached(shard_count))  # a copy: callers cannot corrupt the cache

    def owned(self, member: str, shard_count: int) -> frozenset[int]:
        """The shards ``member`` should own; empty if it is not a member."""
        return self._cached(shard_count).get(member, frozenset())

    def _cached(self, shard_count: int) -> dict[str, frozenset[int]]:
        cached = self._assignments.get(shard_count)
        if cached is None:
            cached = self._compute(validate_shard_count(shard_count))
            self._assignments[shard_count] = cached
        return cached

    def _compute(self, shard_count: int) -> dict[str, frozenset[int]]:
        buckets: dict[str, list[int]] = {member: [] for member in self._members}
        for shard in range(shard_count):
            owner = self.owner(shard)
            if owner is not None:
                buckets[owner].append(shard)
        return {member: frozenset(shards) for member, shards in buckets.items()}

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Ring):
            return NotImplemented
        return self._members == other._members

    def __hash__(self) -> int:
        return hash(self._members)

    def __repr__(self) -> str:
        return f"Ring(members={list(self._members)!r}, vnodes={VNODES})"
