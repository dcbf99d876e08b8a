"""Running an ``http:`` handler: one request per attempt, on the node's pooled client.

The request carries ``Idempotency-Key: <job id>:<slot>`` (the same on every attempt of a
slot, so the receiver can deduplicate retries) and, unless the job gives a body, the run's
context as JSON. Header values written ``${env:NAME}`` are resolved here, from the node's
environment, and the resolved values appear in no error, log line or output, in any spelling
(``node.handlers.scrubbing``). A status in the job's ``ok_status`` succeeds; any other fails
the attempt, so retries apply. The status and the first ``KEPT_BYTES`` of the response are
kept as the run's result (``pulse runs show``); only the status with ``keep_body: false``
(jobs written over the API unless ``api.http_body`` is ``keep``). The client connects only
where the egress guard allows (``cluster.outbound``). Guarded by
tests/e2e/test_http_handler.py.
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from typing import Any

import httpx

from cluster.jobs.handlerrefs import HttpTarget, MissingSecret, resolve
from cluster.settings import mask_url
from node.handlers.context import Outcome, RunContext, finished, timed_out
from node.handlers.scrubbing import scrub

KEPT_BYTES = 4096
BODYLESS = ("GET", "DELETE")  # sent without the default context body


def context_body(ctx: RunContext) -> dict[str, Any]:
    return {
        "payload": ctx.payload,
        "job": ctx.job_name,
        "job_id": str(ctx.job_id),
        "tenant": ctx.tenant_id,
        "slot": ctx.scheduled_for.isoformat(),
        "attempt": ctx.attempt,
        "idempotency_key": ctx.idempotency_key,
    }


def _content(target: HttpTarget, ctx: RunContext) -> tuple[bytes | None, str | None]:
    """The request body and its content type."""
    if not target.has_body:
        if target.method in BODYLESS:
            return None, None
        return json.dumps(context_body(ctx), ensure_ascii=False).encode(), "application/json"
    if isinstance(target.body, str):
        return target.body.encode(), "text/plain; charset=utf-8"
    return json.dumps(target.body, ensure_ascii=False).encode(), "application/json"


async def _head(response: httpx.Response) -> bytearray:
    """The first ``KEPT_BYTES`` of the body, and one more if there are more."""
    kept = bytearray()
    async for chunk in response.aiter_bytes():
        kept += chunk[: KEPT_BYTES + 1 - len(kept)]
        if len(kept) > KEPT_BYTES:
            break
    return kept


async def run_http(
    client: httpx.AsyncClient, target: HttpTarget, ctx: RunContext, timeout_s: float
) -> Outcome:
    started = time.monotonic()
    secrets: list[str] = []
    headers: dict[str, str] = {}
    try:
        for name, value in target.headers:
            headers[name] = resolve(value, os.environ)
            if headers[name] != value:
                secrets.append(headers[name])
    except MissingSecret as exc:
        message = f"header {name}: environment variable {exc.name} is not set on this node"
        return Outcome("failed", message, time.monotonic() - started, None)
    body, content_type = _content(target, ctx)
    if content_type is not None and not any(k.lower() == "content-type" for k in headers):
        headers["Content-Type"] = content_type
    headers["Idempotency-Key"] = ctx.idempotency_key
    if ctx.traceparent is not None:  # the attempt's span (--otel): the receiver's parent
        headers["traceparent"] = ctx.traceparent
    limit_s = min(timeout_s, target.timeout_s or timeout_s)
    try:
        request = client.build_request(
            target.method, target.url, headers=headers, content=body, timeout=limit_s
        )
    except httpx.InvalidURL as exc:  # e.g. 0177.0.0.1, which urlsplit let through
        return Outcome("failed", f"{mask_url(target.url)}: {exc}", time.monotonic() - started)
    try:
        async with asyncio.timeout(limit_s):
            response = await client.send(request, stream=True)
            try:
                kept = await _head(response) if target.keep_body else bytearray()
            finally:
                await response.aclose()
    except (TimeoutError, httpx.TimeoutException):
        return timed_out(ctx, limit_s, time.monotonic() - started)
    except httpx.HTTPError as exc:
        error = f"{target.method} {mask_url(target.url)}: {type(exc).__name__}: {exc}"
        return Outcome("failed", scrub(error, secrets), time.monotonic() - started)
    duration = time.monotonic() - started
    result: dict[str, Any] = {"status": response.status_code, "body_kept": False}
    if target.keep_body:
        result = {
            "status": response.status_code,
            "body": scrub(bytes(kept[:KEPT_BYTES]).decode("utf-8", "replace"), secrets),
            "body_truncated": len(kept) > KEPT_BYTES,
        }
    done = finished(ctx, None, duration, result)  # the result kept as the run's output
    if target.accepts(response.status_code):
        return done
    error = f"HTTP {response.status_code} from {target.method} {mask_url(target.url)}"
    return done._replace(status="failed", error=error)
