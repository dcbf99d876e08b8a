"""``/api/jobs``: list, read, create, change, delete, pause, resume and trigger jobs.

Bodies take the keys of job files and go through the job-file parsing (``JobSpec``), so
every job option works here as in ``pulse jobs apply``; responses take the keys of
``pulse jobs show --json``. Writes check the token's tenant scope, the handler
allow-list (``cluster.config.admission``: a shell command is stored as argv) and the rules
for forwarded handlers (``cluster.web.forwarded``) first, then change the job and write its
audit row in one transaction.
"""

from __future__ import annotations

import json
from dataclasses import replace
from functools import partial
from typing import Any

from fastapi import APIRouter, HTTPException, Query, Request, Response
from pydantic import BaseModel, Field

from cluster.config.admission import NotAllowed, admit
from cluster.errors import InvalidInput
from cluster.jobs.fields import DEFAULT_TENANT, MAX_NAME_LENGTH
from cluster.jobs.files import specs_of
from cluster.jobs.labels import parse_label
from cluster.jobs.models import JOB_STATUSES, Job, iso
from cluster.jobs.spec import JobSpec
from cluster.web.audit import record
from cluster.web.auth import Principal, Reader, Writer
from cluster.web.bodies import (
    MAX_CURSOR_LENGTH,
    MAX_QUERY_LENGTH,
    decode_cursor,
    encode_cursor,
    iso_time,
    json_body,
    json_object,
    request_body,
)
from cluster.web.budgeted import audited, checked
from cluster.web.forwarded import api_targets
from cluster.web.state import api_policy, state_of

router = APIRouter(tags=["jobs"])

_JOB_BODY = request_body(
    {
        "type": "object",
        "description": "A job-file entry: name, tenant, schedule, handler, "
        "payload, tz, catch_up, ... (docs/web.md)",
    }
)


def _scoped(who: Principal, entry: dict[str, Any]) -> dict[str, Any]:
    """A scoped token's entries belong to its tenant (filled in when absent). A job the API
    writes may be run over the API (``api_run``) unless its entry says otherwise."""
    entry = {"api_run": True, **entry}
    if who.scope is not None:
        entry = {"tenant": who.scope, **entry}
        if entry["tenant"] != who.scope:
            raise HTTPException(403, f"this token reaches only tenant {who.scope!r}")
    return entry


def runnable(job: Job, given_input: bool = False) -> None:
    """403 unless API tokens may run ``job`` (``api_run``); 422 for a payload to a job
    without a ``payload_schema`` (docs/security.md, "Who may run and feed what")."""
    if not job.api_run:
        raise HTTPException(
            403,
            {
                "field": "api_run",
                "message": f"{job.name!r} was not written over the API and does not opt in "
                "(api_run: true in its definition)",
            },
        )
    if given_input and job.payload_schema is None:
        raise InvalidInput(
            "payload", "the job has no payload_schema: over the API a payload needs one"
        )


async def admitted(
    request: Request, who: Principal, specs: list[JobSpec], many: bool = False
) -> list[JobSpec]:
    """The specs with their handlers as the API stores them (``cluster.config.admission``);
    403 naming the field for a handler the cluster does not let this token write."""
    async with state_of(request).pool.store() as store:
        policy = await api_policy(store, who.scope)
    admitted = []
    for position, spec in enumerate(specs, 1):
        field = f"entry {position}: handler" if many else "handler"
        if spec.watch and not spec.handler:  # runs nothing: its runs come from pings
            admitted.append(spec)
            continue
        try:
            handler = admit(spec.handler, policy, field)
        except NotAllowed as exc:
            raise HTTPException(403, {"field": exc.field, "message": exc.problem}) from exc
        admitted.append(replace(spec, handler=handler))
    return admitted


def _tenant(entry: dict[str, Any]) -> str | None:
    tenant = entry.get("tenant")
    return tenant if isinstance(tenant, str) else None


class JobsPage(BaseModel):
    """What ``GET /api/jobs`` answers, for the OpenAPI document only: the page is written
    by its statement (``cluster.jobs.sqljson``), never through this model."""

    jobs: list[dict[str, Any]] = Field(description="Each job as `pulse jobs show --json`.")
    next_cursor: str | None = Field(description="The cursor of the next page; null: last.")


# ?label=key=value (repeatable): jobs with every one of these labels.
_LABELS = Query(None, max_length=MAX_QUERY_LENGTH, description="key=value (repeatable).")


@router.get("/api/jobs", response_model=JobsPage)
async def list_jobs(
    who: Reader,
    request: Request,
    tenant: str | None = Query(None, max_length=MAX_NAME_LENGTH),
    status: str | None = Query(None, max_length=20, description=", ".join(JOB_STATUSES)),
    q: str | None = Query(
        None, max_length=MAX_QUERY_LENGTH, description="Part of the name or handler."
    ),
    cursor: str | None = Query(
        None, max_length=MAX_CURSOR_LENGTH, description="next_cursor of the previous page."
    ),
    limit: int = Query(100, ge=1, le=500),
    label: list[str] | None = _LABELS,
) -> Response:
    """A page of jobs by (tenant, name)."""
    wanted = dict(parse_label(text) for text in label or ())
    if status is not None and status not in JOB_STATUSES:
        raise InvalidInput("status", f"must be one of {', '.join(JOB_STATUSES)}")
    after = None
    if cursor is not None:
        parts = decode_cursor(cursor, 2)
        if not all(isinstance(p, str) for p in parts):
            raise InvalidInput("cursor", "not a cursor this API returned")
        after = (parts[0], parts[1])
    async with state_of(request).pool.store(who.scope) as store:
        page = await store.pages.jobs(
            tenant=tenant, status=status, q=q, after=after, limit=limit, labels=wanted
        )
    # The statement wrote each job's JSON (cluster.jobs.sqljson): passed on as it came.
    cursor = encode_cursor(*page.last) if page.last and page.count == limit else None
    body = f'{{"jobs": {page.jobs}, "next_cursor": {json.dumps(cursor)}}}'
    return Response(body.encode(), media_type="application/json")


@router.post("/api/jobs", status_code=201, openapi_extra=_JOB_BODY)
async def create_job(request: Request, who: Writer) -> dict[str, Any]:
    """Create a job (409 if its name is taken in its tenant)."""
    entry = _scoped(who, await json_object(request))
    spec = await checked(request, who, partial(JobSpec.from_mapping, entry), _tenant(entry))
    (spec,) = await admitted(request, who, [spec])
    (spec,) = await api_targets(request, [spec])
    token = None
    async with state_of(request).pool.store(who.scope, actor=who.name) as store:
        async with store.transaction():
            await store.definitions.add(spec)
            if spec.watch:
                token = await store.watch.token(spec.name, spec.tenant)
            await record(store, who, "create", spec.tenant, spec.name)
        details = await store.details(spec.name, spec.tenant)
    if token is not None:  # shown this once: only its hash is kept
        details["ping_url"] = f"{str(request.base_url).rstrip('/')}/api/ping/{token}"
    return details


async def _batch(request: Request, who: Principal) -> tuple[list[JobSpec], Any]:
    """The admitted specs of an apply or plan body, and its ``expect_revisions``."""
    data = await json_body(request)
    expect = None
    if isinstance(data, dict) and "jobs" in data:
        expect = data.get("expect_revisions")
        data = data["jobs"]
    if not isinstance(data, list):
        raise InvalidInput("body", "must be a list of jobs (or an object with a 'jobs' list)")
    entries = [_scoped(who, e) if isinstance(e, dict) else e for e in data]
    specs = await checked(request, who, partial(specs_of, entries))
    specs = await admitted(request, who, specs, many=True)
    return await api_targets(request, specs, many=True), expect


def _expected(expect: Any) -> dict[tuple[str, str], int] | None:
    """``{"tenant/name": revision}`` as ``apply(expect=...)`` takes it."""
    if expect is None:
        return None
    if not isinstance(expect, dict) or not all(
        isinstance(k, str) and "/" in k and isinstance(v, int) and not isinstance(v, bool)
        for k, v in expect.items()
    ):
        raise InvalidInput("expect_revisions", 'must map "tenant/name" to a revision number')
    found = {}
    for key, revision in expect.items():
        tenant, _, name = key.partition("/")
        found[(tenant, name)] = revision
    return found


@router.post("/api/jobs:apply", openapi_extra=_JOB_BODY)
async def apply_jobs(request: Request, who: Writer) -> dict[str, Any]:
    """Create or update a list of jobs, all or nothing (``pulse jobs apply``); with
    {"expect_revisions": {"tenant/name": N}}, only if each job is still at that revision
    (409 for a plan gone stale, nothing written)."""
    specs, expect = await _batch(request, who)
    expected = _expected(expect)
    pool = state_of(request).pool
    async with pool.store(who.scope, actor=who.name) as store, store.transaction():
        result = await store.definitions.apply(specs, expect=expected)
        changed = {"create": set(result.created), "update": set(result.updated)}
        for spec in specs:
            label = spec.name if spec.tenant == DEFAULT_TENANT else f"{spec.tenant}/{spec.name}"
            for verb, labels in changed.items():
                if label in labels:
                    await record(store, who, verb, spec.tenant, spec.name, "apply")
    return {
        "created": result.created,
        "updated": result.updated,
        "unchanged": result.unchanged,
        "removed": result.removed,
    }


@router.post("/api/jobs:plan", openapi_extra=_JOB_BODY)
async def plan_jobs(request: Request, who: Writer) -> dict[str, Any]:
    """What ``/api/jobs:apply`` of the same body would change (``pulse jobs apply --plan
    --json``); writes nothing. Feed each job's ``revision`` back as expect_revisions."""
    specs, _ = await _batch(request, who)
    async with state_of(request).pool.store(who.scope, actor=who.name) as store:
        plan: dict[str, Any] = (await store.plans.plan(specs)).to_json()
    return plan


@router.get("/api/jobs/{tenant}/{name:path}")
async def get_job(request: Request, tenant: str, name: str, who: Reader) -> dict[str, Any]:
    """The job, its next slots and its latest runs (``pulse jobs show --json``)."""
    async with state_of(request).pool.store(who.scope) as store:
        return await store.details(name, tenant)


@router.put("/api/jobs/{tenant}/{name:path}", openapi_extra=_JOB_BODY)
async def replace_job(request: Request, tenant: str, name: str, who: Writer) -> dict[str, Any]:
    """Replace the definition of an existing job (404 if there is none)."""
    entry = await json_object(request)
    for key, value in (("tenant", tenant), ("name", name)):
        if key in entry and entry[key] != value:
            raise InvalidInput(key, f"must be {value!r} as in the path, or left out")
    entry = {"api_run": True, **entry, "tenant": tenant, "name": name}
    spec = await checked(request, who, partial(JobSpec.from_mapping, entry), tenant)
    (spec,) = await admitted(request, who, [spec])
    (spec,) = await api_targets(request, [spec])
    async with state_of(request).pool.store(who.scope, actor=who.name) as store:
        async with store.transaction():
            await store.get(name, tenant)  # 404 if absent or out of scope
            await store.definitions.apply([spec])
            await record(store, who, "update", tenant, name)
        return await store.details(name, tenant)


@router.delete("/api/jobs/{tenant}/{name:path}", status_code=204)
async def delete_job(
    request: Request, tenant: str, name: str, who: Writer, cascade: bool = False
) -> Response:
    """Delete the job and its run history; 409 while other jobs wait for it, unless
    ``?cascade=true``, which deletes them too."""
    async with (
        state_of(request).pool.store(who.scope, actor=who.name) as store,
        store.transaction(),
    ):
        for removed in await store.remove(name, tenant, cascade=cascade):
            await record(store, who, "delete", tenant, removed)
    return Response(status_code=204)


async def _control(request: Request, who: Principal, verb: str, tenant: str, name: str) -> Any:
    note, until, count = None, None, 1
    if verb in ("pause", "skip-next") and (await request.body()).strip():
        body = await json_object(request, {"note", "until"} if verb == "pause" else {"count"})
        note = body.get("note")
        if note is not None and not isinstance(note, str):
            raise InvalidInput("note", "must be text")
        until = None if body.get("until") is None else iso_time(body["until"], "until")
        count = body.get("count", 1)
    async with state_of(request).pool.store(who.scope, actor=who.name) as store:
        async with store.transaction():
            if verb == "pause" and until is not None:
                await store.holds.pause_until(name, tenant, until, note=note)
                note = f"until {until.isoformat()}" + (f": {note}" if note else "")
            elif verb == "skip-next":
                skipped = await store.holds.skip_next(name, tenant, count)
                note = ", ".join(iso(s) or "" for s in skipped)
            elif verb == "pause":
                await store.pause(name, tenant, note=note)
            elif verb == "resume":
                await store.resume(name, tenant)
            else:
                runnable(await store.get(name, tenant))
                await store.trigger(name, tenant)
            await record(store, who, verb, tenant, name, note)
        return await store.details(name, tenant)


@router.post("/api/jobs/{tenant}/{name:path}/pause")
async def pause_job(request: Request, tenant: str, name: str, who: Writer) -> dict[str, Any]:
    """Stop scheduling the job; an optional body {"note": "..."} says why, and
    {"until": ISO 8601} makes it resume by itself at its first slot from then."""
    result: dict[str, Any] = await _control(request, who, "pause", tenant, name)
    return result


@router.post("/api/jobs/{tenant}/{name:path}/skip-next")
async def skip_next(request: Request, tenant: str, name: str, who: Writer) -> dict[str, Any]:
    """Record the job's next runs skipped (body {"count": N}, default 1; 409 while it runs)."""
    result: dict[str, Any] = await _control(request, who, "skip-next", tenant, name)
    return result


@router.post("/api/jobs/{tenant}/{name:path}/resume")
async def resume_job(request: Request, tenant: str, name: str, who: Writer) -> dict[str, Any]:
    """Resume a paused job at its next future slot."""
    result: dict[str, Any] = await _control(request, who, "resume", tenant, name)
    return result


@router.post("/api/jobs/{tenant}/{name:path}/trigger")
async def trigger_job(request: Request, tenant: str, name: str, who: Writer) -> dict[str, Any]:
    """Run the job now, keeping its schedule (409 while it runs). An optional body
    {"payload": {...}} or {"merge_payload": {...}} runs it with that input, {"slot": ISO
    8601} runs that past slot again; the answer then has "queued" (docs/web.md)."""
    if not (await request.body()).strip():
        result: dict[str, Any] = await _control(request, who, "trigger", tenant, name)
        return result
    body = await json_object(request, {"payload", "merge_payload", "slot"})
    slot = None if body.get("slot") is None else iso_time(body["slot"], "slot")
    for key in ("payload", "merge_payload"):
        if key in body and not isinstance(body[key], dict):
            raise InvalidInput(key, "must be a JSON object")
    given_input = body.get("payload") is not None or body.get("merge_payload") is not None
    # the payload is checked under a budget
    async with (
        audited(request, who, tenant, name),
        state_of(request).pool.store(who.scope) as store,
    ):
        async with store.transaction():
            runnable(await store.get(name, tenant), given_input)
            queued = await store.inputs.trigger(
                name,
                tenant,
                payload=body.get("payload"),
                merge_payload=body.get("merge_payload"),
                slot=slot,
            )
            detail = f"{queued.origin} {iso(queued.slot)}"
            await record(store, who, "trigger", tenant, name, detail)
        details: dict[str, Any] = await store.details(name, tenant)
    return {**details, "queued": queued.to_json()}


@router.post("/api/jobs/{tenant}/{name:path}/cancel")
async def cancel_job(request: Request, tenant: str, name: str, who: Writer) -> list[dict[str, Any]]:
    """Stop a running slot (body {"slot": ISO 8601} or {"all": true} when several of an
    overlap `allow` job run); it is recorded cancelled by this token. 409 when none runs."""
    body = await json_object(request, {"slot", "all"}) if (await request.body()).strip() else {}
    slot = None if body.get("slot") is None else iso_time(body["slot"], "slot")
    every = body.get("all", False)
    if not isinstance(every, bool):
        raise InvalidInput("all", "must be true or false")
    if every and slot is not None:
        raise InvalidInput("all", "give either slot or all")
    async with state_of(request).pool.store(who.scope) as store, store.transaction():
        asked = await store.runcontrol.cancel(
            name, tenant, by=f"token {who.name}", slot=slot, every=every
        )
        await record(
            store, who, "cancel", tenant, name, ", ".join(iso(a.slot) or "" for a in asked)
        )
    return [
        {
            "job": a.job or name,
            "slot": iso(a.slot),
            "attempt": a.attempt,
            "node_id": a.node_id,
            "watched": a.watched,
            "queued": a.queued,
        }
        for a in asked
    ]
