"""The order the suite runs in: modules with a ``slow`` test first.

``bin/test`` runs the suite on four pytest-xdist workers that take one test at a time
(docs/design/tests.md). Started first, the long end-to-end tests overlap each other and the
rest, and the many short tests fill both workers at the end, so neither waits alone on a
long test. A module moves as a whole and keeps its own order, so a module-scoped fixture is
still set up once per worker that runs the module; the few modules whose fixture is too
costly for that (a schema of 200,000 jobs) run whole on one worker instead
(``WholeModules``). Run serially, only the order changes.
"""

from __future__ import annotations

import pytest
from xdist.scheduler import LoadScopeScheduling

#: Modules whose tests share one costly module-scoped fixture: each runs on one worker.
WHOLE_MODULES = frozenset(
    {"tests/integration/test_claim_plan.py", "tests/integration/test_prune_plan.py"}
)


def _module(item: pytest.Item) -> str:
    return item.nodeid.split("::", 1)[0]


def slow_modules_first(items: list[pytest.Item]) -> None:
    """Sort ``items`` in place: modules with a test marked ``slow``, then the others, each
    group in collection order (the sort is stable, so every worker sees the same order)."""
    slow = {_module(item) for item in items if item.get_closest_marker("slow")}
    items.sort(key=lambda item: _module(item) not in slow)


class WholeModules(LoadScopeScheduling):
    """xdist's scheduling by work units, where each test is a unit of its own except in the
    modules of ``WHOLE_MODULES``, which are one unit each (and so, as the largest, sent
    first). A worker is sent a unit whenever it has two tests or fewer left."""

    def _split_scope(self, nodeid: str) -> str:
        module = nodeid.split("::", 1)[0]
        return module if module in WHOLE_MODULES else nodeid
