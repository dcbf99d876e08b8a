"""Posting one alert event to a webhook: the request every sender makes (a node delivering
the outbox, ``pulse alerts test`` from the CLI host) and a one-line account of the answer.

The request carries the event id as ``Idempotency-Key`` and ``webhook-id`` (stable across
retries and nodes, so a receiver can drop repeats), the send time as ``webhook-timestamp``
and, with a secret, ``webhook-signature`` as Standard Webhooks define it: the HMAC of id,
time and exact body, so a receiver can refuse a replay (an old time, an id seen), and
``X-Pulse-Signature`` (the body's alone) for receivers written before. The request goes
through the egress guard of the client it is given (``cluster.outbound``). Neither the
secret nor the webhook's full URL, which may hold a token, ever appears in an ``Answer``:
it is stored as the delivery's last error and logged.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from urllib.parse import urlsplit

import httpx

from cluster.alerts.rules import (
    IDEMPOTENCY_HEADER,
    SIGNATURE_HEADER,
    WEBHOOK_ID,
    WEBHOOK_SIGNATURE,
    WEBHOOK_TIMESTAMP,
    redact_url,
    signature,
    standard_signature,
)

DEFAULT_TIMEOUT_S = 10.0
USER_AGENT = "pulse-alerts"
MAX_ERROR_LENGTH = 300


@dataclass(frozen=True)
class Answer:
    """What a receiver answered: a 2xx status is delivered, anything else is retried."""

    status: int | None  # HTTP status; None when no answer came
    error: str | None  # why it did not count as delivered, one line without secrets

    @property
    def ok(self) -> bool:
        return self.status is not None and 200 <= self.status < 300

    def describe(self) -> str:
        if self.status is not None:
            return f"HTTP {self.status}" + (f" ({self.error})" if self.error else "")
        return self.error or "no answer"


def headers(
    payload: bytes,
    event_id: str,
    secret: str | None,
    timestamp: int | None = None,
    *,
    legacy: bool = False,
) -> dict[str, str]:
    """The request's headers, signed at ``timestamp`` (Unix seconds, now by default), with
    ``X-Pulse-Signature`` too when ``legacy``; ``ValueError`` for a ``whsec_`` secret that
    is not base64."""
    sent_at = int(time.time()) if timestamp is None else timestamp
    found = {
        "Content-Type": "application/json",
        "User-Agent": USER_AGENT,
        IDEMPOTENCY_HEADER: event_id,
        WEBHOOK_ID: event_id,
        WEBHOOK_TIMESTAMP: str(sent_at),
    }
    if secret is not None:
        found[WEBHOOK_SIGNATURE] = standard_signature(payload, secret, event_id, sent_at)
        if legacy:
            found[SIGNATURE_HEADER] = signature(payload, secret)
    return found


def scrub(text: str, url: str) -> str:
    """``text`` (an error message) with every part of ``url`` that may carry a token hidden."""
    parts = urlsplit(url)
    hidden = redact_url(url)
    secrets = sorted(
        {url, url.split("#", 1)[0], parts.query, parts.path, parts.netloc} - {"", "/"},
        key=len,
        reverse=True,
    )
    for piece in secrets:
        if len(piece) > 1 and piece != hidden:
            text = text.replace(piece, hidden)
    line = " ".join(text.split())
    return line[:MAX_ERROR_LENGTH]


async def post(
    client: httpx.AsyncClient,
    url: str,
    payload: bytes,
    *,
    event_id: str,
    secret: str | None,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    legacy_signature: bool = False,
) -> Answer:
    """POST ``payload``; never raises for what the network or the receiver does."""
    try:
        signed = headers(payload, event_id, secret, legacy=legacy_signature)
    except ValueError as exc:
        return Answer(None, str(exc))
    try:
        async with asyncio.timeout(timeout_s):
            response = await client.post(
                url,
                content=payload,
                headers=signed,
                timeout=timeout_s,
            )
    except TimeoutError:
        return Answer(None, f"no answer within {timeout_s:g}s")
    except httpx.HTTPError as exc:
        message = str(exc).strip()
        what = type(exc).__name__ + (f": {message}" if message else "")
        return Answer(None, scrub(what, url))
    if 200 <= response.status_code < 300:
        return Answer(response.status_code, None)
    return Answer(response.status_code, scrub(response.reason_phrase or "", url) or None)
