"""The console: a static page and script served by ``pulse web`` itself (no build step, no
asset from elsewhere), which reads and changes Pulse through the same API as any client.

Signing in exchanges a token for a server-side session (``cluster.store.access.console_sessions``)
whose random id the cookie carries (HttpOnly, SameSite=Strict, Secure unless the server listens on
loopback only and the request came over plain HTTP): the token itself never reaches the browser's
cookie jar. Signing out deletes the session; revoking the token deletes all of its sessions. The
page learns the session's CSRF token from ``GET /console/session`` and sends it on every change. The
script writes text only through ``textContent``, so data never becomes markup. It compares job and
run statuses with the constants of ``/console/statuses.js``, written from the enums the API uses.
"""

from __future__ import annotations

import json
from importlib import resources
from pathlib import Path
from typing import Any

from fastapi import APIRouter, HTTPException, Request, Response
from fastapi.responses import HTMLResponse, RedirectResponse
from fastapi.staticfiles import StaticFiles

from cluster.jobs.models import JobStatus, RunStatus
from cluster.web.auth import SESSION_COOKIE, Principal, Reader, check_token, source_of
from cluster.web.bodies import json_object
from cluster.web.state import state_of
from cluster.web.tokens import csrf_token, new_session_id, token_hash

router = APIRouter(include_in_schema=False)
STATUSES_JS = "".join(
    f"const {name} = Object.freeze({json.dumps({s.name: s.value for s in enum})});\n"
    for name, enum in (("JOB_STATUS", JobStatus), ("RUN_STATUS", RunStatus))
)


def _static_dir() -> Path:
    return Path(str(resources.files("cluster.web").joinpath("static")))


def static_files() -> StaticFiles:
    return StaticFiles(directory=_static_dir())


def _session(who: Principal) -> dict[str, Any]:
    return {
        "name": who.name,
        "role": who.token.role,
        "tenant": who.scope,
        "csrf": csrf_token(who.secret),
    }


@router.get("/")
async def root() -> RedirectResponse:
    return RedirectResponse("/console/", status_code=303)


@router.get("/console/")
async def page() -> HTMLResponse:
    return HTMLResponse((_static_dir() / "index.html").read_text("utf-8"))


@router.get("/console/statuses.js")
async def statuses() -> Response:
    """The job and run statuses as constants of the console's script, in the enums' order."""
    return Response(STATUSES_JS, media_type="text/javascript")


@router.post("/console/session")
async def sign_in(request: Request, response: Response) -> dict[str, Any]:
    """Exchange a token for a session cookie. JSON only: a cross-site form cannot send it."""
    if request.headers.get("content-type", "").split(";")[0].strip() != "application/json":
        raise HTTPException(415, 'send the token as JSON: {"token": "..."}')
    secret = (await json_object(request, {"token"})).get("token")
    info = await check_token(request, secret if isinstance(secret, str) else None)
    state = state_of(request)
    policy = state.sessions
    session_id = new_session_id()
    async with state.pool.store() as store:
        expires_at = await store.sessions.create(
            info.name, token_hash(session_id), idle_s=policy.idle_s, max_age_s=policy.max_age_s
        )
    if expires_at is None:  # the token was revoked or expired since the check above
        raise HTTPException(401, "a valid token is needed (Authorization: Bearer ...)")
    response.set_cookie(
        SESSION_COOKIE,
        session_id,
        max_age=int(policy.max_age_s),
        httponly=True,
        samesite="strict",
        secure=policy.secure_always or request.url.scheme == "https",
        path="/",
    )
    return _session(Principal(info, source_of(request), session_id, from_cookie=True))


@router.get("/console/session")
async def session(who: Reader) -> dict[str, Any]:
    """Who the session is, and its CSRF token."""
    return _session(who)


@router.delete("/console/session", status_code=204)
async def sign_out(request: Request, who: Reader) -> Response:
    """End the session: its row is deleted, so the cookie is worthless even if kept."""
    if who.from_cookie:
        async with state_of(request).pool.store() as store:
            await store.sessions.delete(token_hash(who.secret))
    response = Response(status_code=204)
    response.delete_cookie(SESSION_COOKIE, path="/", httponly=True, samesite="strict")
    return response
