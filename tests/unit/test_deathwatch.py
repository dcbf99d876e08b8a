"""Who watches whom: every member is watched by exactly one other while there are two."""

from __future__ import annotations

from node.membership.deathwatch import watched


def test_each_member_watches_the_next_one_in_sorted_order_cyclically() -> None:
    members = ("n1", "n2", "n3")
    assert [watched(members, m) for m in members] == ["n2", "n3", "n1"]
    assert sorted(str(watched(members, m)) for m in members) == list(members)


def test_a_lone_member_watches_nobody_and_a_newcomer_is_placed_by_its_id() -> None:
    assert watched(("n1",), "n1") is None
    assert watched((), "n1") is None
    assert watched(("n1", "n3"), "n2") == "n3"  # not yet in its own list
    assert watched(("a", "b"), "c") == "a"
