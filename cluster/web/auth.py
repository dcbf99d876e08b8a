"""Who is calling: the token of a request (``Authorization: Bearer`` for API clients, the
session cookie for the console), its role and tenant scope, and the CSRF check.

A request authenticated by its cookie must carry the session's CSRF token in
``X-CSRF-Token`` on every method that changes something; a bearer token needs none (a
browser never attaches one on its own). Failed authentications count against the source
address (``limits``). No token is ever logged or echoed.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Annotated

from fastapi import Depends, HTTPException, Request

from cluster.store.access import TokenInfo
from cluster.web.limits import FailureLimiter
from cluster.web.state import state_of
from cluster.web.tokens import allows, csrf_matches, token_hash

SESSION_COOKIE = "pulse_session"
CSRF_HEADER = "X-CSRF-Token"
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})


@dataclass(frozen=True)
class Principal:
    token: TokenInfo
    source: str
    secret: str  # kept only for the session's CSRF token; never logged or returned

    @property
    def scope(self) -> str | None:
        return self.token.tenant

    @property
    def name(self) -> str:
        return self.token.name


def source_of(request: Request) -> str:
    return request.client.host if request.client else "unknown"


def _presented(request: Request) -> tuple[str | None, bool]:
    """The token a request presents, and whether it came from the session cookie."""
    header = request.headers.get("authorization")
    if header:
        scheme, _, value = header.partition(" ")
        return (value.strip() or None) if scheme.lower() == "bearer" else None, False
    cookie = request.cookies.get(SESSION_COOKIE)
    return cookie or None, cookie is not None


def _refuse_limited(limiter: FailureLimiter, source: str) -> None:
    wait_s = limiter.retry_after_s(source)
    if wait_s is not None:
        raise HTTPException(
            429,
            "too many failed authentications from this address; try again later",
            headers={"Retry-After": str(int(wait_s) + 1)},
        )


async def check_token(request: Request, secret: str | None, *, cookie: bool = False) -> TokenInfo:
    """The live token ``secret`` names, else 401. A token presented and refused counts
    against the source address (none presented is not a guess); a refused session cookie
    is cleared, so a stale one does not count again at every page load."""
    state = state_of(request)
    source = source_of(request)
    _refuse_limited(state.limiter, source)
    info = None
    if secret:
        async with state.pool.store() as store:
            info = await store.access.authenticate(token_hash(secret))
    if info is None:
        headers = {"WWW-Authenticate": "Bearer"}
        if secret:
            state.limiter.failed(source)
        if cookie:
            headers["Set-Cookie"] = (
                f"{SESSION_COOKIE}=; Max-Age=0; Path=/; HttpOnly; SameSite=Strict"
            )
        raise HTTPException(
            401, "a valid token is needed (Authorization: Bearer ...)", headers=headers
        )
    return info


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
        return Principal(info, source_of(request), secret)

    return dependency


# The caller, as a route parameter: ``who: Reader`` needs at least the read role.
Reader = Annotated[Principal, Depends(need("read"))]
Writer = Annotated[Principal, Depends(need("write"))]
Admin = Annotated[Principal, Depends(need("admin"))]


def unscoped(principal: Principal) -> None:
    """403 for a tenant-scoped token: what follows spans every tenant."""
    if principal.scope is not None:
        raise HTTPException(403, "this needs a token not scoped to a tenant")
