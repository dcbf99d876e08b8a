"""The ASGI application of ``pulse web``: the API routers, the console, error answers,
the 1 MiB body limit and the security headers of every response.

Stateless: every request reads Postgres (and Redis for status) through the pool; console
sessions are rows in Postgres and CSRF tokens derive from their ids, so replicas behind a
load balancer need nothing in common but the database (docs/design/web.md). An error
answer never carries a driver's message: those name hosts, users and ports, so they go to
the log and the caller reads only that the store is unavailable.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from http import HTTPStatus
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from cluster.errors import (
    Conflict,
    InvalidInput,
    MembershipError,
    NotFound,
    NotRunning,
    PulseError,
    StoreError,
)
from cluster.settings import ClusterSettings
from cluster.store.jobstore.pool import DEFAULT_TOKEN_REQUESTS, StorePool
from cluster.web import (
    alerts,
    audit,
    backfills,
    calendars,
    console,
    jobs,
    ledger,
    named_limits,
    pings,
    quotas,
    revisions,
    runs,
    status,
    tenants,
)
from cluster.web.inflight import TokenGate
from cluster.web.limits import (
    DEFAULT_AUTH_FAILURES,
    DEFAULT_AUTH_WINDOW_S,
    DEFAULT_PINGS_PER_SOURCE,
    DEFAULT_PINGS_PER_TOKEN,
    PingRate,
    SignInThrottle,
)
from cluster.web.state import SessionPolicy, WebState

logger = logging.getLogger(__name__)

MAX_BODY_BYTES = 1024 * 1024
SECURITY_HEADERS = [
    (
        b"content-security-policy",
        b"default-src 'self'; img-src 'self' data:; object-src 'none'; "
        b"base-uri 'none'; frame-ancestors 'none'; form-action 'self'",
    ),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"no-referrer"),
    (b"x-frame-options", b"DENY"),
    (b"cache-control", b"no-store"),
]
# Only over TLS (directly, or from a trusted proxy's X-Forwarded-Proto): a browser ignores
# it over plain HTTP, and a loopback console without TLS must stay reachable.
HSTS = (b"strict-transport-security", b"max-age=31536000")

# The answer to each Pulse error, the first class it is an instance of.
ERROR_STATUS: tuple[tuple[type[PulseError], int], ...] = (
    (Conflict, 409),
    (InvalidInput, 422),
    (NotRunning, 409),
    (NotFound, 404),
    (StoreError, 503),
    (MembershipError, 503),
    (PulseError, 500),
)
# What a 503 says: the driver's own message names hosts, users and ports.
UNAVAILABLE: tuple[tuple[type[PulseError], str], ...] = (
    (StoreError, "the store is unavailable; try again later"),
    (MembershipError, "the member registry is unavailable; try again later"),
)


def _error(status_code: int, message: str, field: str | None = None) -> JSONResponse:
    """``{"error": "Not Found", "message": "...", "field": "..."}`` (``field`` for bad input)."""
    body: dict[str, Any] = {"error": HTTPStatus(status_code).phrase, "message": message}
    if field is not None:
        body["field"] = field
    return JSONResponse(body, status_code=status_code)


class Guard:
    """Refuses a body over ``MAX_BODY_BYTES`` with 413 before the app reads it, and adds
    the security headers to every response."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def send_guarded(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = [h for h in message.get("headers", []) if h[0] != b"cache-control"]
                tls = [HSTS] if scope.get("scheme") == "https" else []
                message["headers"] = headers + SECURITY_HEADERS + tls
            await send(message)

        length = dict(scope.get("headers", [])).get(b"content-length")
        if length is not None and (not length.isdigit() or int(length) > MAX_BODY_BYTES):
            await _error(413, "the body is larger than 1 MiB")(scope, receive, send_guarded)
            return
        chunks: list[bytes] = []
        size = 0
        more = True
        while more:  # read the body up to the limit, then hand it on
            message = await receive()
            if message["type"] != "http.request":
                break
            chunks.append(message.get("body", b""))
            size += len(chunks[-1])
            if size > MAX_BODY_BYTES:
                await _error(413, "the body is larger than 1 MiB")(scope, receive, send_guarded)
                return
            more = message.get("more_body", False)
        body = b"".join(chunks)
        sent = False

        async def replay() -> Message:
            nonlocal sent
            if not sent:
                sent = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        await self.app(scope, replay, send_guarded)


def create_app(
    settings: ClusterSettings,
    *,
    auth_failures: int = DEFAULT_AUTH_FAILURES,
    auth_window_s: float = DEFAULT_AUTH_WINDOW_S,
    sessions: SessionPolicy | None = None,
    token_requests: int = DEFAULT_TOKEN_REQUESTS,
    pings_per_token: int = DEFAULT_PINGS_PER_TOKEN,
    pings_per_source: int = DEFAULT_PINGS_PER_SOURCE,
) -> FastAPI:
    pool = StorePool(settings)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        await pool.open()
        try:
            yield
        finally:
            await pool.close()

    app = FastAPI(
        title="Pulse",
        summary="The HTTP API of Pulse, a distributed cron scheduler.",
        openapi_url="/api/openapi.json",
        docs_url="/api/docs",
        redoc_url=None,
        lifespan=lifespan,
    )
    app.state.pulse = WebState(
        pool,
        SignInThrottle(auth_failures, auth_window_s),
        sessions or SessionPolicy(),
        PingRate(pings_per_token, pings_per_source),
    )

    @app.exception_handler(PulseError)
    async def pulse_error(request: Request, exc: PulseError) -> JSONResponse:
        status_code = next(code for kind, code in ERROR_STATUS if isinstance(exc, kind))
        if isinstance(exc, InvalidInput):
            return _error(status_code, exc.problem, exc.field)
        for kind, said in UNAVAILABLE:
            if isinstance(exc, kind):
                logger.warning("%s: %s", said, exc, extra={"event": "web_store_error"})
                return _error(status_code, said)
        return _error(status_code, str(exc))

    @app.exception_handler(OverflowError)
    async def out_of_range(request: Request, exc: OverflowError) -> JSONResponse:
        """Date or number arithmetic on a value no check above caught: the caller's value."""
        logger.warning("out of range: %s", exc, extra={"event": "web_out_of_range"})
        return _error(422, "a value is out of range", "body")

    @app.exception_handler(RequestValidationError)
    async def bad_request(request: Request, exc: RequestValidationError) -> JSONResponse:
        first = exc.errors()[0] if exc.errors() else {}
        where = [str(p) for p in first.get("loc", ()) if p not in ("query", "path", "body")]
        return _error(422, str(first.get("msg", "bad request")), ".".join(where) or "request")

    @app.exception_handler(HTTPException)
    async def http_error(request: Request, exc: HTTPException) -> JSONResponse:
        detail = exc.detail
        if isinstance(detail, dict):
            response = _error(exc.status_code, detail["message"], detail["field"])
        else:
            response = _error(exc.status_code, str(detail))
        for key, value in (exc.headers or {}).items():
            response.headers[key] = value
        return response

    @app.get("/api/health", tags=["cluster"])
    async def health() -> dict[str, bool]:
        """Whether this process answers (no token needed; reads nothing)."""
        return {"ok": True}

    # runs and revisions first: GET .../{name:path}/run and .../revisions must match
    # before GET .../{name:path}
    routers = (
        runs,
        revisions,
        jobs,
        pings,
        backfills,
        tenants,
        named_limits,
        quotas,
        calendars,
        status,
        alerts,
        audit,
        ledger,
        console,
    )
    for module in routers:
        app.include_router(module.router)
    app.mount("/console/static", console.static_files(), name="static")
    app.add_middleware(TokenGate, per_token=token_requests)  # inside Guard: 429s get its headers
    app.add_middleware(Guard)
    return app
