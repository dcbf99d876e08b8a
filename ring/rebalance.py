"""What a node must change to go from the shards it holds to the shards it should own.

The ring only says what is desired; the advisory locks say what is held. The
shard-lock service turns the gap between the two into a ``ShardDiff``: release
first (so a peer can pick those shards up), then acquire. ``moved`` measures
how much of the map a membership change disturbed, for logs, metrics and tests.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass


@dataclass(frozen=True)
class ShardDiff:
    """Shards to give up and shards to take, disjoint by construction."""

    release: frozenset[int]
    acquire: frozenset[int]

    @property
    def empty(self) -> bool:
        """True when the held shards already match the desired ones."""
        return not self.release and not self.acquire


def diff(held: Collection[int], desired: Collection[int]) -> ShardDiff:
    """Release what is held but not desired; acquire what is desired but not held."""
    held_set = frozenset(held)
    desired_set = frozenset(desired)
    return ShardDiff(release=held_set - desired_set, acquire=desired_set - held_set)


def moved(before: Mapping[str, frozenset[int]], after: Mapping[str, frozenset[int]]) -> int:
    """Number of shards whose owner differs between two assignments.

    A shard present in only one of them (the shard count changed, or the ring
    was empty) counts as moved. Raises ValueError if either assignment gives
    one shard to two members.
    """
    owners_before = _owners(before)
    owners_after = _owners(after)
    shards = owners_before.keys() | owners_after.keys()
    return sum(1 for shard in shards if owners_before.get(shard) != owners_after.get(shard))


def _owners(assignment: Mapping[str, frozenset[int]]) -> dict[int, str]:
    owners: dict[int, str] = {}
    for member, shards in assignment.items():
        for shard in shards:
            previous = owners.setdefault(shard, member)
            if previous != member:
                raise ValueError(f"shard {shard} is assigned to both {previous!r} and {member!r}")
    return owners
