"""Posting one alert event to a webhook: the request every sender makes (a node delivering
the outbox, ``pulse alerts test`` from the CLI host) and a one-line account of the answer.

The request carries the event id as ``Idempotency-Key`` (stable across retries and nodes,
so a receiver can drop repeats) and, with a secret, ``X-Pulse-Signature``: the HMAC of the
exact body sent. Neither the secret nor the webhook's full URL, which may hold a token, ever
appears in an ``Answer``: it is stored as the delivery's last error and logged.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from urllib.parse import urlsplit

import httpx

from cluster.alerts.rules import IDEMPOTENCY_HEADER, SIGNATURE_HEADER, redact_url, signature

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


def headers(payload: bytes, event_id: str, secret: str | None) -> dict[str, str]:
    found = {
        "Content-Type": "application/json",
        "User-Agent": USER_AGENT,
        IDEMPOTENCY_HEADER: event_id,
    }
    if secret is not None:
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
) -> Answer:
    """POST ``payload``; never raises for what the network or the receiver does."""
    try:
        async with asyncio.timeout(timeout_s):
            response = await client.post(
                url,
                content=payload,
                headers=headers(payload, event_id, secret),
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
