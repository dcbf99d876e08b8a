"""The ``int[]`` literal a claim or recovery pass sends for its shards (``int_array``)."""

from __future__ import annotations

from cluster.store.lock.records import int_array


def test_the_literal_lists_the_shards_sorted_and_once() -> None:
    assert int_array(frozenset({12, 3, 200})) == "{3,12,200}"
    assert int_array([5, 1, 5]) == "{1,5}"
    assert int_array(()) == "{}"


def test_a_held_set_is_encoded_once_and_a_changed_one_anew() -> None:
    held = frozenset(range(0, 256, 3))
    first = int_array(held)
    assert int_array(held) is first
    assert int_array(frozenset(held)) is first  # an equal set made elsewhere
    moved = held - {0}
    assert int_array(moved) == first.replace("{0,", "{")
