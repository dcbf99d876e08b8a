"""Requests in flight per token: a token past its share is refused at once (429), so one
client holding many slow requests cannot take every connection of the pool and starve the
others.

The gate runs before anything else reads the database (on ``/api/`` and the console's
session, not on static files) and keys on the SHA-256 of the token
presented (the bearer token, else the session cookie), so even the lookup of the token
counts; requests presenting none pass (they are answered 401 without a query). Kept in the
process, like ``limits``: each replica gates on its own. Memory is bounded by the requests
in flight.
"""

from __future__ import annotations

from http.cookies import CookieError, SimpleCookie

from starlette.datastructures import Headers
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Receive, Scope, Send

from cluster.store.jobstore.pool import DEFAULT_TOKEN_REQUESTS
from cluster.web.auth import SESSION_COOKIE
from cluster.web.tokens import token_hash

# What reads the database; the console's page and its static files do not, and a browser
# fetches them side by side with its cookie.
GATED_PATHS = ("/api/", "/console/session")


def presented(headers: Headers) -> str | None:
    """The token a request presents, as ``cluster.web.auth`` reads it: bearer, else cookie."""
    header = headers.get("authorization")
    if header:
        scheme, _, value = header.partition(" ")
        return value.strip() or None if scheme.lower() == "bearer" else None
    try:
        cookie = SimpleCookie(headers.get("cookie", ""))
    except CookieError:
        return None
    morsel = cookie.get(SESSION_COOKIE)
    return morsel.value or None if morsel is not None else None


class TokenGate:
    """At most ``per_token`` requests of one token in flight; the next ones get 429."""

    def __init__(self, app: ASGIApp, per_token: int = DEFAULT_TOKEN_REQUESTS) -> None:
        self.app = app
        self.per_token = per_token
        self._in_flight: dict[bytes, int] = {}

    def in_flight(self) -> int:
        return sum(self._in_flight.values())

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        gated = scope["type"] == "http" and scope["path"].startswith(GATED_PATHS)
        secret = presented(Headers(scope=scope)) if gated else None
        if secret is None:
            await self.app(scope, receive, send)
            return
        key = token_hash(secret)
        count = self._in_flight.get(key, 0)
        if count >= self.per_token:
            refused = JSONResponse(
                {
                    "error": "Too Many Requests",
                    "message": f"this token has {count} requests in flight, its limit; "
                    "wait for one to end",
                },
                status_code=429,
                headers={"Retry-After": "1"},
            )
            await refused(scope, receive, send)
            return
        self._in_flight[key] = count + 1
        try:
            await self.app(scope, receive, send)
        finally:
            left = self._in_flight[key] - 1
            if left:
                self._in_flight[key] = left
            else:
                del self._in_flight[key]
