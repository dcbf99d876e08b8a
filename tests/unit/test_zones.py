"""Zone shard spaces (ring/zones.py): where a pinned job lives and who may lock it."""

from __future__ import annotations

import uuid

import pytest

from cluster.errors import InvalidInput
from cluster.jobs.fields import parse_zones
from cluster.jobs.spec import JobSpec
from ring import MAX_SHARD_COUNT, Ring
from ring.zones import (
    ZONE_SHARD_BASE,
    ZONE_SHARDS,
    dark_shards,
    normalize_zones,
    space_of,
    space_shards,
    zone_owned,
    zone_shard_for,
)

MEMBERS = {"a1": "a", "a2": "a", "b1": "b", "c1": "c"}
SPACES = {1: ("a",), 2: ("a", "b"), 3: ("c",)}


def test_zone_spaces_lie_above_every_default_shard_and_apart() -> None:
    assert ZONE_SHARD_BASE >= MAX_SHARD_COUNT
    assert space_shards(1) == range(ZONE_SHARD_BASE, ZONE_SHARD_BASE + ZONE_SHARDS)
    assert space_shards(2).start == space_shards(1).stop
    for space in (1, 2, 7):
        assert {space_of(s) for s in space_shards(space)} == {space}
    assert space_of(0) is None and space_of(MAX_SHARD_COUNT - 1) is None
    with pytest.raises(ValueError):
        space_shards(0)


def test_a_pinned_job_stays_in_its_space_and_its_shard_is_stable() -> None:
    job = uuid.UUID("12345678-1234-5678-1234-567812345678")
    shard = zone_shard_for(job, 3)
    assert shard in space_shards(3)
    assert zone_shard_for(str(job), 3) == shard
    assert shard - space_shards(3).start == zone_shard_for(job, 1) - space_shards(1).start


def test_every_zone_shard_has_exactly_one_owner_and_it_is_in_the_zones() -> None:
    owned = {n: zone_owned(n, z, MEMBERS, SPACES) for n, z in MEMBERS.items()}
    for space, zones in SPACES.items():
        for shard in space_shards(space):
            owners = [n for n, shards in owned.items() if shard in shards]
            assert len(owners) == 1, (shard, owners)
            assert MEMBERS[owners[0]] in zones
    # the same ring a node of the zones would build over that zone's members
    ring = Ring(["a1", "a2"])
    assert owned["a1"] & set(space_shards(1)) == {
        space_shards(1)[i] for i in ring.owned("a1", ZONE_SHARDS)
    }


def test_a_node_never_wants_the_shards_of_a_zone_set_without_its_zone() -> None:
    # Whatever it believes about the others (here: that nobody lives in zone c).
    assert not zone_owned("a1", "a", {"a1": "a"}, {3: ("c",)})
    # A lone node of the zone takes its whole space, even before it knows its peers.
    assert zone_owned("c9", "c", {}, {3: ("c",)}) == frozenset(space_shards(3))


def test_zone_sets_are_normalised_and_bad_names_refused() -> None:
    assert normalize_zones(["b", "a", "b"]) == ("a", "b")
    assert parse_zones("eu-1, eu-2") == ("eu-1", "eu-2")
    assert parse_zones(None) == ()
    for bad in ("", "a,,b", "a b", ",", "x" * 65, []):
        with pytest.raises(InvalidInput, match="zones"):
            parse_zones(bad)  # type: ignore[arg-type]
    spec = JobSpec.from_mapping(
        {"name": "j", "schedule": "@hourly", "handler": "m:f", "zones": ["b", "a"]}
    )
    assert spec.zones == ("a", "b") and spec.validated() == spec


def test_dark_shards_are_those_of_spaces_with_no_live_zone() -> None:
    assert dark_shards(MEMBERS, SPACES) == frozenset()
    alive = {"b1": "b", "c1": "c"}
    assert dark_shards(alive, SPACES) == frozenset(space_shards(1))
    assert dark_shards({}, SPACES) == frozenset(s for n in SPACES for s in space_shards(n))
