"""The order the suite runs in: modules with a ``slow`` test first.

``bin/test`` runs the suite on two pytest-xdist workers that take one test at a time
(docs/design/tests.md). Started first, the long end-to-end tests overlap each other and the
rest, and the many short tests fill both workers at the end, so neither waits alone on a
long test. A module moves as a whole and keeps its own order, so a module-scoped fixture is
still set up once per worker that runs the module. Run serially, only the order changes.
"""

from __future__ import annotations

import pytest


def _module(item: pytest.Item) -> str:
    return item.nodeid.split("::", 1)[0]


def slow_modules_first(items: list[pytest.Item]) -> None:
    """Sort ``items`` in place: modules with a test marked ``slow``, then the others, each
    group in collection order (the sort is stable, so every worker sees the same order)."""
    slow = {_module(item) for item in items if item.get_closest_marker("slow")}
    items.sort(key=lambda item: _module(item) not in slow)
