"""Who is calling: the token of a request (``Authorization: Bearer`` for API clients, the
console's session cookie, which names a session of a token), its role and tenant scope,
and the CSRF check.

A request authenticated by its cookie must carry the session's CSRF token in
``X-CSRF-Token`` on every method that changes something; a bearer token needs none (a
browser never attaches one on its own). A presented secret is always looked up, and a
failed one counts against its source address and prefix (``limits``): past the limit a
failure answers 429, never a valid token. No secret is ever logged or echoed.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Annotated

from fastapi import Depends, HTTPException, Request

from cluster.store.access.tokens import TokenInfo
from cluster.web.state import state_of
from cluster.web.tokens import allows, csrf_matches, token_hash

SESSION_COOKIE = "pulse_session"
CSRF_HEADER = "X-CSRF-Token"
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
CLEAR_COOKIE = f"{SESSION_COOKIE}=; Max-Age=0; Path=/; HttpOnly; SameSite=Strict"


@dataclass(frozen=True)
class Principal:
    token: TokenInfo
    source: str
    # the session id (cookie) or the token (bearer); never logged or returned
    secret: str
    from_cookie: bool = False

    @property
    def scope(self) -> str | None:
        return self.token.tenant

    @property
    def name(self) -> str:
        return self.token.name


def source_of(request: Request) -> str:
    """The client's address: the peer's, or a trusted proxy's ``X-Forwarded-For`` (uvicorn
    rewrites the peer only for the addresses of ``--forwarded-allow-ips``)."""
    return request.client.host if request.client else "unknown"


def _presented(request: Request) -> tuple[str | None, bool]:
    """The secret a request presents, and whether it came from the session cookie."""
    header = request.headers.get("authorization")
    if header:
        scheme, _, value = header.partition(" ")
        return (value.strip() or None) if scheme.lower() == "bearer" else None, False
    cookie = request.cookies.get(SESSION_COOKIE)
    return cookie or None, cookie is not None


async def check_token(request: Request, secret: str | None, *, cookie: bool = False) -> TokenInfo:
    """The live token ``secret`` is (or, from the cookie, whose live session it names), else
    401, or 429 for a failure from a throttled source or prefix. None presented is not a
    guess and is not counted; a refused cookie is cleared, so a stale one does not count
    again at every page load."""
    state = state_of(request)
    info = None
    if secret:
        async with state.pool.store() as store:
            if cookie:
                info = await store.sessions.authenticate(
                    token_hash(secret), idle_s=state.sessions.idle_s
                )
            else:
                info = await store.access.authenticate(token_hash(secret))
    if info is not None:
        return info
    headers = {"WWW-Authenticate": "Bearer"}
    if cookie:
        headers["Set-Cookie"] = CLEAR_COOKIE
    wait_s = state.throttle.refused(source_of(request), secret) if secret else None
    if wait_s is not None:
        headers["Retry-After"] = str(int(wait_s) + 1)
        raise HTTPException(429, "too many failed sign-ins; try again later", headers=headers)
    raise HTTPException(401, "a valid token is needed (Authorization: Bearer ...)", headers=headers)


def need(role: str) -> Callable[[Request], Awaitable[Principal]]:
    """A dependency: the caller, if its token has at least ``role``; else 401 or 403."""

    async def dependency(request: Request) -> Principal:
        secret, from_cookie = _presented(request)
        info = await check_token(request, secret, cookie=from_cookie)
        assert secret is not None
        if (
            from_cookie
            and request.method not in SAFE_METHODS
            and not csrf_matches(secret, request.headers.get(CSRF_HEADER))
        ):
            raise HTTPException(403, f"missing or wrong {CSRF_HEADER} for this session")
        if not allows(info.role, role):
            raise HTTPException(403, f"this needs a token with role {role} (this one: {info.role})")
        return Principal(info, source_of(request), secret, from_cookie)

    return dependency


# The caller, as a route parameter: ``who: Reader`` needs at least the read role.
Reader = Annotated[Principal, Depends(need("read"))]
Writer = Annotated[Principal, Depends(need("write"))]
Admin = Annotated[Principal, Depends(need("admin"))]


def unscoped(principal: Principal) -> None:
    """403 for a tenant-scoped token: what follows spans every tenant."""
    if principal.scope is not None:
        raise HTTPException(403, "this needs a token not scoped to a tenant")
