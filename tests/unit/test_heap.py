"""The node's start-up heap, frozen out of the cycle collector's walk (node.heap)."""

from __future__ import annotations

import gc
import weakref
from collections.abc import Iterator

import pytest

from node import heap


@pytest.fixture
def unfrozen() -> Iterator[None]:
    gc.unfreeze()
    yield
    gc.unfreeze()


class Cycle:
    def __init__(self) -> None:
        self.me = self


def test_settling_freezes_what_survives_and_collects_what_does_not(unfrozen: None) -> None:
    kept = Cycle()
    dropped = Cycle()
    gone = weakref.ref(dropped)
    del dropped
    frozen = heap.settle()
    assert frozen == gc.get_freeze_count() > 1_000
    tracked = {id(o) for o in gc.get_objects()}
    assert id(kept) not in tracked, "a frozen object is in no generation any more"
    assert gone() is None, "the garbage cycle was collected first, not frozen"
    after = Cycle()
    assert id(after) in {id(o) for o in gc.get_objects()}, "objects made later are walked"
