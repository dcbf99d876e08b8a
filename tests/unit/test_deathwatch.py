"""Who watches whom: every member by exactly one other, from another zone where the zones'
sizes allow it, so a zone going down leaves a watcher of its nodes alive."""

from __future__ import annotations

from node.membership.deathwatch import watch_order, watched

ZONES = {"n1": "a", "n2": "b", "n3": "c", "n4": "a", "n5": "a", "n6": "b"}


def _watchers(members: tuple[str, ...]) -> dict[str, str]:
    """Watched member -> its watcher."""
    return {str(watched(members, ZONES, m)): m for m in members}


def test_every_member_is_watched_by_exactly_one_other() -> None:
    for count in range(2, 7):
        members = tuple(sorted(ZONES)[:count])
        watchers = _watchers(members)
        assert sorted(watchers) == list(members)
        assert all(watcher != member for member, watcher in watchers.items())


def test_watchers_sit_in_another_zone_where_the_zones_allow_it() -> None:
    members = ("n1", "n2", "n3", "n4", "n5", "n6")  # a: 3, b: 2, c: 1
    assert watch_order(members, ZONES) == ["n1", "n2", "n3", "n4", "n6", "n5"]
    cross = [m for m, w in _watchers(members).items() if ZONES[m] != ZONES[w]]
    assert len(cross) == 5  # zone a has half the members: one pair must share it
    even = ("n1", "n2", "n3", "n4", "n6")  # a: 2, b: 2, c: 1
    assert all(ZONES[m] != ZONES[w] for m, w in _watchers(even).items())


def test_a_zone_kill_leaves_a_watcher_of_its_nodes() -> None:
    members = ("n1", "n2", "n3", "n4")  # the chaos run's shape: a: 2, b: 1, c: 1
    for zone in "abc":
        dead = {m for m in members if ZONES[m] == zone}
        assert any(w not in dead for m, w in _watchers(members).items() if m in dead)


def test_a_lone_member_watches_nobody_and_a_newcomer_is_placed_by_its_id() -> None:
    assert watched(("n1",), ZONES, "n1") is None
    assert watched((), ZONES, "n1") is None
    assert watched(("n1", "n3"), ZONES, "n2") == "n3"  # not yet in its own list
    assert watched(("a", "b"), {}, "c") == "a"
