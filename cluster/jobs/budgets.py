"""The time budget of checking what a caller sent: ``pulse web`` checks a job or a payload
under one (``within``), in a worker thread, and the checks spend it as they go (``spend``),
so a payload that takes too long is refused (``OverBudget``, a 422 the API audits) instead
of holding the process. The CLI and the Python API check without one: the operator's own
input. The budget lives in a context variable, which ``asyncio.to_thread`` carries into
the thread. Why so: docs/design/inputs.md.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import TypeVar

from cluster.errors import InvalidInput

__all__ = ["CHECK_BUDGET_S", "OverBudget", "bounded", "off_loop", "spend", "within"]

CHECK_BUDGET_S = 2.0
# A check that ignores its budget (one step of it running long) is answered anyway.
GRACE_S = 1.0
T = TypeVar("T")

# (deadline on the monotonic clock, the budget in seconds) while a check is bounded
_budget: ContextVar[tuple[float, float] | None] = ContextVar("pulse_check_budget", default=None)


class OverBudget(InvalidInput):
    """A check that did not finish within its time budget."""


@contextmanager
def within(seconds: float = CHECK_BUDGET_S) -> Iterator[None]:
    """Checks made inside (and in threads started inside) end by ``seconds`` from now."""
    token = _budget.set((time.monotonic() + seconds, seconds))
    try:
        yield
    finally:
        _budget.reset(token)


def bounded() -> bool:
    """Whether the check running now has a budget (it comes from the API)."""
    return _budget.get() is not None


def spend(field: str) -> None:
    """``OverBudget`` naming ``field`` once the budget is spent; nothing without one."""
    found = _budget.get()
    if found is not None and time.monotonic() > found[0]:
        raise OverBudget(field, f"took longer than its {found[1]:g} s budget to check")


async def off_loop(check: Callable[[], T]) -> T:
    """``check()`` in a worker thread; under a budget, ``OverBudget`` once the budget and
    ``GRACE_S`` are spent even if the check has not returned (its thread then stops at its
    next ``spend``)."""
    found = _budget.get()
    if found is None:
        return await asyncio.to_thread(check)
    left_s = max(found[0] - time.monotonic(), 0.0) + GRACE_S
    try:
        return await asyncio.wait_for(asyncio.to_thread(check), left_s)
    except TimeoutError as exc:
        raise OverBudget("body", f"took longer than its {found[1]:g} s budget to check") from exc
