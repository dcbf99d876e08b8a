"""Shard spaces for zone-pinned jobs: where a pinned job lives and who may lock it.

A job pinned to a set of zones (``--zones a,b``) lives in its zone set's own shard space:
``ZONE_SHARDS`` shards starting at ``ZONE_SHARD_BASE + (space - 1) * ZONE_SHARDS``, far
above any default shard (the shard count is at most ``MAX_SHARD_COUNT``). Each space has
its own consistent-hash ring over the live members of its zones, and only a node whose own
zone is in the set ever wants (and so locks) those shards. The claim statement is
unchanged: it already claims only in the shards a node holds.

The space number of a zone set is allocated once by the database (``zone_spaces``);
everything here is pure so every node derives the same map from the same inputs.
The constants are part of the cluster contract, repeated in migration 012.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterable, Mapping

from ring.hashring import Ring
from ring.shards import MAX_SHARD_COUNT, shard_for

ZONE_SHARDS = 16
ZONE_SHARD_BASE = MAX_SHARD_COUNT
# Where an each-zone job's parent row is parked: no node ever locks it, so the parent
# itself never runs; its children, one per zone, do (docs/design/zones.md).
PARKED_SHARD = 2**31 - 1
# Where watch jobs live: no node ever locks it, so a watch job is never claimed; its runs
# come from pings, and the late pass reads this shard (docs/design/watch.md).
WATCH_SHARD = 2**31 - 2

# The same names a node's --zone accepts (cluster/settings.py).
_ZONE = re.compile(r"[A-Za-z0-9_.\-]{1,64}")


def normalize_zones(zones: Iterable[str]) -> tuple[str, ...]:
    """The zone set sorted and de-duplicated; ValueError on an empty or malformed name."""
    names = list(zones)
    for name in names:
        if not isinstance(name, str) or not _ZONE.fullmatch(name):
            raise ValueError(f"zone {name!r}: use 1-64 of A-Z a-z 0-9 _ . -")
    if not names:
        raise ValueError("name at least one zone")
    return tuple(sorted(set(names)))


def space_shards(space: int) -> range:
    """The shards of zone space ``space`` (numbered from 1)."""
    if space < 1:
        raise ValueError(f"zone spaces are numbered from 1, got {space}")
    first = ZONE_SHARD_BASE + (space - 1) * ZONE_SHARDS
    return range(first, first + ZONE_SHARDS)


def zone_shard_for(job_id: uuid.UUID | str, space: int) -> int:
    """The shard of a job pinned to the zone set of ``space``."""
    return space_shards(space)[shard_for(job_id, ZONE_SHARDS)]


def space_of(shard: int) -> int | None:
    """The zone space a shard belongs to, or None for a default, the parked or the watch
    shard."""
    if shard < ZONE_SHARD_BASE or shard in (PARKED_SHARD, WATCH_SHARD):
        return None
    return (shard - ZONE_SHARD_BASE) // ZONE_SHARDS + 1


def zone_members(zones: Iterable[str], member_zones: Mapping[str, str]) -> tuple[str, ...]:
    """The members (of ``member_zones``: id -> zone) in one of ``zones``, sorted."""
    wanted = set(zones)
    return tuple(sorted(m for m, zone in member_zones.items() if zone in wanted))


def zone_owned(
    node_id: str,
    zone: str,
    member_zones: Mapping[str, str],
    spaces: Mapping[int, tuple[str, ...]],
) -> frozenset[int]:
    """The zone-space shards ``node_id`` (in ``zone``) should own.

    ``member_zones`` maps the live members to their zones (this node is counted whatever
    it says); ``spaces`` maps each space number to its zone set. A node wants only shards
    of spaces that include its own zone, so a pinned job never runs elsewhere, whatever
    another node believes about the members.
    """
    members = {**member_zones, node_id: zone}
    owned: set[int] = set()
    for space, zones in spaces.items():
        if zone not in zones:
            continue
        ring = Ring(zone_members(zones, members))
        shards = space_shards(space)
        owned.update(shards[i] for i in ring.owned(node_id, ZONE_SHARDS))
    return frozenset(owned)


def dark_shards(
    member_zones: Mapping[str, str], spaces: Mapping[int, tuple[str, ...]]
) -> frozenset[int]:
    """The shards of the spaces none of whose zones has a member: nobody locks them, so
    their orphaned runs are recovered by any node (docs/design/zones.md)."""
    live = set(member_zones.values())
    return frozenset(
        shard
        for space, zones in spaces.items()
        if not live.intersection(zones)
        for shard in space_shards(space)
    )
