"""The console: a static page and script served by ``pulse web`` itself (no build step, no
asset from elsewhere), which reads and changes Pulse through the same API as any client.

Signing in exchanges a token for a session cookie (HttpOnly, SameSite=Strict, Secure behind
TLS) holding that token, so revoking the token ends the session too. The page learns the
session's CSRF token from ``GET /console/session`` and sends it on every change. The script
writes text only through ``textContent``, so data never becomes markup.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path
from typing import Any

from fastapi import APIRouter, HTTPException, Request, Response
from fastapi.responses import HTMLResponse, RedirectResponse
from fastapi.staticfiles import StaticFiles

from cluster.web.auth import SESSION_COOKIE, Principal, Reader, check_token
from cluster.web.bodies import json_object
from cluster.web.tokens import csrf_token

router = APIRouter(include_in_schema=False)

SESSION_MAX_AGE_S = 12 * 3600


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


@router.post("/console/session")
async def sign_in(request: Request, response: Response) -> dict[str, Any]:
    """Exchange a token for a session cookie. JSON only: a cross-site form cannot send it."""
    if request.headers.get("content-type", "").split(";")[0].strip() != "application/json":
        raise HTTPException(415, 'send the token as JSON: {"token": "..."}')
    secret = (await json_object(request)).get("token")
    info = await check_token(request, secret if isinstance(secret, str) else None)
    assert isinstance(secret, str)
    response.set_cookie(
        SESSION_COOKIE,
        secret,
        max_age=SESSION_MAX_AGE_S,
        httponly=True,
        samesite="strict",
        secure=request.url.scheme == "https",
        path="/",
    )
    source = request.client.host if request.client else "unknown"
    return _session(Principal(info, source, secret))


@router.get("/console/session")
async def session(who: Reader) -> dict[str, Any]:
    """Who the session is, and its CSRF token."""
    return _session(who)


@router.delete("/console/session", status_code=204)
async def sign_out(who: Reader) -> Response:
    """End the session: the cookie is cleared (the token itself stays valid)."""
    response = Response(status_code=204)
    response.delete_cookie(SESSION_COOKIE, path="/", httponly=True, samesite="strict")
    return response
