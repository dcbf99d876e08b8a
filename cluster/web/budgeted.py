"""Checks of what a token sent, run off the event loop under a time budget: a job's
definition (its ``payload_schema`` in the API's dialect, its payloads against it) and a
trigger's payload. A check past its budget answers 422 and leaves an audit row, so a
token trying slow input again and again shows in ``GET /api/audit``; meanwhile the event
loop serves every other request (``/api/health`` within a second). Why so:
docs/design/inputs.md.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import TypeVar

from fastapi import Request

from cluster.jobs.budgets import CHECK_BUDGET_S, OverBudget, off_loop, within
from cluster.web.audit import record
from cluster.web.auth import Principal
from cluster.web.state import state_of

logger = logging.getLogger(__name__)

T = TypeVar("T")


async def checked(
    request: Request, who: Principal, check: Callable[[], T], tenant: str | None = None
) -> T:
    """``check()`` in a worker thread under the check budget."""
    async with audited(request, who, tenant):
        return await off_loop(check)


@asynccontextmanager
async def audited(
    request: Request, who: Principal, tenant: str | None = None, job: str | None = None
) -> AsyncIterator[None]:
    """Checks inside run under the check budget; one past it is written to the audit trail
    (in a transaction of its own: the request's own rolls back) and answered 422."""
    try:
        with within(CHECK_BUDGET_S):
            yield
    except OverBudget as exc:
        logger.warning(
            "refused input of token %s: %s %s",
            who.name,
            exc.field,
            exc.problem,
            extra={"event": "web_check_over_budget"},
        )
        async with state_of(request).pool.store(who.scope) as store:
            detail = f"{exc.field} {exc.problem}"
            await record(store, who, "refused", tenant or who.scope, job, detail)
        raise
