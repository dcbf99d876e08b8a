"""``GET /api/audit``: the slot ledger over a time range (``pulse audit``), streamed as JSON
lines: each slot, then the summary. Read role; the token's tenant scope is a condition of
every statement the audit runs, so a scoped token never sees another tenant's slots."""

from __future__ import annotations

import asyncio
import json
from collections import deque
from collections.abc import AsyncIterator
from contextlib import aclosing

from fastapi import APIRouter, Query, Request
from fastapi.responses import StreamingResponse

from cluster.jobs.fields import MAX_NAME_LENGTH
from cluster.jobs.ledger import Line, Summary
from cluster.store.jobstore.pool import StorePool
from cluster.store.observe.audit import Scope, audit_lines
from cluster.web.auth import Reader
from cluster.web.bodies import MAX_TIME_LENGTH, iso_time
from cluster.web.state import state_of

router = APIRouter(tags=["audit"])

MAX_LINES = 100_000  # slots audited per answer
MAX_LAST = 1000
YIELD_EVERY = 1000


@router.get("/api/audit")
async def audit(
    who: Reader,
    request: Request,
    start: str = Query(..., alias="from", max_length=MAX_TIME_LENGTH, description="ISO 8601."),
    end: str = Query(..., alias="to", max_length=MAX_TIME_LENGTH, description="Excluded."),
    tenant: str | None = Query(None, max_length=MAX_NAME_LENGTH),
    job: str | None = Query(None, max_length=MAX_NAME_LENGTH),
    last: int | None = Query(None, ge=1, le=MAX_LAST, description="Only the last N lines."),
    grace_s: float = Query(60.0, ge=0, le=86400),
) -> StreamingResponse:
    """The audit of ``[from, to)`` as JSON lines: ``{"type": "slot", ...}`` per slot (or
    the ``last`` N), then ``{"type": "summary", ...}``; at most 100,000 slots are audited,
    and ``truncated`` says the range held more."""
    scope = Scope(
        iso_time(start, "from"),
        iso_time(end, "to"),
        tenant=tenant,
        job=job,
        scope=who.scope,
        grace_s=grace_s,
    ).checked()  # bad input: 422 before anything streams
    body = _lines(state_of(request).pool, scope, last)
    return StreamingResponse(body, media_type="application/x-ndjson")


async def _lines(pool: StorePool, scope: Scope, last: int | None) -> AsyncIterator[bytes]:
    """The answer's lines. The audit stops at MAX_LINES slots (``truncated``): a request
    holds a pooled connection and this process's loop, so its work has a bound."""
    summary = Summary()
    kept: deque[Line] = deque(maxlen=last or None)
    truncated = False
    async with (
        pool.store(scope.scope) as store,
        aclosing(audit_lines(store.db.conn, scope)) as lines,
    ):
        async for line in lines:
            if summary.lines == MAX_LINES:
                truncated = True
                break
            summary.add(line)
            if last is not None:
                kept.append(line)
            else:
                yield _json({"type": "slot", **line.to_json()})
            if summary.lines % YIELD_EVERY == 0:
                await asyncio.sleep(0)  # other requests run between slices of a long audit
    for line in kept:
        yield _json({"type": "slot", **line.to_json()})
    yield _json({"type": "summary", **summary.to_json(), "truncated": truncated})


def _json(item: dict[str, object]) -> bytes:
    return (json.dumps(item, ensure_ascii=False) + "\n").encode()
