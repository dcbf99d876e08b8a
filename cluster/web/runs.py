"""``/api/runs``: the run history, newest slot first, a page at a time, and one run of a
job with its output."""

from __future__ import annotations

import json
from typing import Any

from fastapi import APIRouter, Query, Request, Response
from pydantic import BaseModel, Field

from cluster.errors import InvalidInput
from cluster.jobs.fields import MAX_NAME_LENGTH
from cluster.jobs.models import RUN_STATUSES
from cluster.web.auth import Reader
from cluster.web.bodies import (
    MAX_CURSOR_LENGTH,
    MAX_TIME_LENGTH,
    decode_cursor,
    encode_cursor,
    iso_time,
)
from cluster.web.state import state_of

router = APIRouter(tags=["runs"])


class RunsPage(BaseModel):
    """What ``GET /api/runs`` answers, for the OpenAPI document only: the page is written
    by its statement (``cluster.jobs.sqljson``), never through this model."""

    runs: list[dict[str, Any]] = Field(description="Each run as `pulse runs --json`.")
    next_cursor: str | None = Field(description="The cursor of the next page; null: last.")


@router.get("/api/runs", response_model=RunsPage)
async def list_runs(
    who: Reader,
    request: Request,
    tenant: str | None = Query(None, max_length=MAX_NAME_LENGTH),
    job: str | None = Query(None, max_length=MAX_NAME_LENGTH),
    status: str | None = Query(None, max_length=20, description=", ".join(RUN_STATUSES)),
    since: str | None = Query(
        None, max_length=MAX_TIME_LENGTH, description="Slots at or after this ISO 8601 time."
    ),
    cursor: str | None = Query(
        None, max_length=MAX_CURSOR_LENGTH, description="next_cursor of the previous page."
    ),
    limit: int = Query(100, ge=1, le=500),
) -> Response:
    """A page of runs, newest slot first; attempts in flight are ``running``."""
    if status is not None and status not in RUN_STATUSES:
        raise InvalidInput("status", f"must be one of {', '.join(RUN_STATUSES)}")
    since_at = iso_time(since, "since") if since is not None else None
    before = None
    if cursor is not None:
        at, run_id = decode_cursor(cursor, 2)
        if not isinstance(at, str) or not isinstance(run_id, int):
            raise InvalidInput("cursor", "not a cursor this API returned")
        before = (iso_time(at, "cursor"), run_id)
    async with state_of(request).pool.store(who.scope) as store:
        page = await store.pages.runs(
            tenant=tenant, job=job, status=status, since=since_at, before=before, limit=limit
        )
    # The statement wrote each run's JSON (cluster.jobs.sqljson): passed on as it came.
    last = page.last if page.count == limit else None
    cursor = encode_cursor(last[0].isoformat(), last[1]) if last else None
    body = f'{{"runs": {page.runs}, "next_cursor": {json.dumps(cursor)}}}'
    return Response(body.encode(), media_type="application/json")


@router.get("/api/jobs/{tenant}/{name:path}/run")
async def show_run(
    who: Reader,
    request: Request,
    tenant: str,
    name: str,
    slot: str | None = Query(
        None, max_length=MAX_TIME_LENGTH, description="The run of this slot [default: the latest]."
    ),
) -> dict[str, Any]:
    """One run of the job with its output (``pulse runs show --json``)."""
    at = iso_time(slot, "slot") if slot is not None else None
    async with state_of(request).pool.store(who.scope) as store:
        found = await store.run(name, tenant, slot=at)
    shown = {"output": found.output_json(), "metrics": found.metrics}
    return {**found.to_json(), **shown, "coverage": found.coverage}
