"""Alert rules and the events they deliver (pure, no I/O): validation, webhook bodies, and
the signature a receiver checks.

A rule names a channel (a webhook URL), the events it wants and its scope (one job, one
tenant, or the whole cluster). Events are written to an outbox by the statement that
changes the state they report, and delivered by ``node.maintenance.outbox``; this module decides
what a rule accepts and what goes over the wire.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any
from urllib.parse import urlsplit

from cluster.config.mailserver import mail_address
from cluster.errors import InvalidInput
from cluster.jobs.fields import check_text, validate_name

EVENTS = (
    "failed",
    "recovered",
    "lost",
    "late",
    "skipped",
    "paused",
    # Expectations of runs (docs/jobs.md): raised once per run.
    "slow",
    "overdue",
    "too_fast",
    "assertion_failed",
    # A legacy ping for a slot Pulse ran (watch jobs, docs/jobs.md).
    "double_run",
    # A slot of an every-node job closed with a node that missed it (docs/jobs.md).
    "incomplete",
)
FORMATS = ("json", "slack", "pagerduty", "email")
PAGERDUTY_URL = "https://events.pagerduty.com/v2/enqueue"  # Events API v2
MAILTO = "mailto:"  # an email rule's recipients, stored in its url
# The body's HMAC alone: replayable, sent only for rules with legacy_signature (0.x receivers).
SIGNATURE_HEADER = "X-Pulse-Signature"
IDEMPOTENCY_HEADER = "Idempotency-Key"
# Standard Webhooks (https://www.standardwebhooks.com): the id, the send time and both signed.
WEBHOOK_ID = "webhook-id"
WEBHOOK_TIMESTAMP = "webhook-timestamp"
WEBHOOK_SIGNATURE = "webhook-signature"
SECRET_PREFIX = "whsec_"
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
MAX_URL_LENGTH = 2048


@dataclass(frozen=True)
class AlertRule:
    name: str
    url: str
    events: tuple[str, ...] = EVENTS
    format: str = "json"
    secret_env: str | None = None
    tenant: str | None = None
    job: str | None = None
    legacy_signature: bool = False  # also X-Pulse-Signature, for receivers of 0.x

    @classmethod
    def build(
        cls,
        name: str,
        url: str | None,
        *,
        events: str | Iterable[str] | None = None,
        format: str = "json",
        secret_env: str | None = None,
        tenant: str | None = None,
        job: str | None = None,
        to: str | Iterable[str] | None = None,
        legacy_signature: bool = False,
    ) -> AlertRule:
        """Validate every field; ``InvalidInput`` names the first bad one. An email rule
        takes ``to`` (its recipients) instead of a URL; a pagerduty rule's URL defaults to
        the Events API and its ``secret_env`` names the routing key's variable."""
        name = validate_name(name)
        if format not in FORMATS:
            raise InvalidInput("format", f"{format!r}: use {', '.join(FORMATS)}")
        if format == "email":
            if url:
                raise InvalidInput("webhook", "an email rule has recipients (--to), not a webhook")
            url = MAILTO + ",".join(parse_recipients(to))
        else:
            if to:
                raise InvalidInput("to", "applies to --format email only")
            if not url and format == "pagerduty":
                url = PAGERDUTY_URL
            url = _webhook(url)
        if secret_env is not None and not _ENV_NAME.match(secret_env):
            raise InvalidInput("secret-env", f"{secret_env!r} is not an environment variable name")
        if format == "pagerduty" and secret_env is None:
            raise InvalidInput(
                "secret-env", "a pagerduty rule names the variable holding its routing key"
            )
        if format == "email" and secret_env is not None:
            raise InvalidInput("secret-env", "does not apply to an email rule")
        if tenant is not None:
            tenant = validate_name(tenant, "tenant")
        if job is not None:
            job = validate_name(job, "job")
        if legacy_signature and (secret_env is None or format in ("pagerduty", "email")):
            raise InvalidInput(
                "legacy-signature", "needs a json or slack rule signed with --secret-env"
            )
        events_ = parse_events(events)
        return cls(name, url, events_, format, secret_env, tenant, job, legacy_signature)

    def wants(self, event: str, tenant: str, job: str) -> bool:
        if event not in self.events:
            return False
        if self.tenant is not None and self.tenant != tenant:
            return False
        return self.job is None or self.job == job

    @property
    def recipients(self) -> tuple[str, ...]:
        """An email rule's addresses (none for another format)."""
        if not self.url.startswith(MAILTO):
            return ()
        return tuple(a for a in self.url[len(MAILTO) :].split(",") if a)

    def target(self) -> str:
        """Where it sends, safe to print: the recipients, or the redacted webhook."""
        if self.format == "email":
            return ", ".join(self.recipients)
        return redact_url(self.url)

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "webhook": None if self.format == "email" else redact_url(self.url),
            "to": list(self.recipients) if self.format == "email" else None,
            "events": list(self.events),
            "format": self.format,
            "secret_env": self.secret_env,
            "tenant": self.tenant,
            "job": self.job,
            "legacy_signature": self.legacy_signature,
        }


def _webhook(url: str | None) -> str:
    if not url:
        raise InvalidInput("webhook", "missing (an http:// or https:// URL)")
    url = check_text(url, "webhook").strip()
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise InvalidInput("webhook", f"{url!r} is not an http:// or https:// URL")
    if len(url) > MAX_URL_LENGTH:
        raise InvalidInput("webhook", f"must be at most {MAX_URL_LENGTH} characters")
    return url


def parse_recipients(value: str | Iterable[str] | None) -> tuple[str, ...]:
    """``a@x.com,b@y.com`` or a list: each a plain address, none twice, at least one."""
    items = (value or "").split(",") if isinstance(value, str | None) else list(value)
    found: dict[str, None] = {}
    for item in items:
        for part in item.split(","):
            if part.strip():
                found[mail_address(part, "to")] = None
    if not found:
        raise InvalidInput("to", "an email rule needs at least one recipient (--to ADDRESS)")
    if len(found) > 50:
        raise InvalidInput("to", "at most 50 recipients")
    return tuple(found)


def parse_events(value: str | Iterable[str] | None) -> tuple[str, ...]:
    """``failed,lost`` or a list; every name known, order of ``EVENTS``, none twice."""
    if value is None:
        return EVENTS
    names = [v.strip() for v in (value.split(",") if isinstance(value, str) else value)]
    names = [n for n in names if n]
    if not names:
        raise InvalidInput("on", f"name at least one event of {', '.join(EVENTS)}")
    unknown = [n for n in names if n not in EVENTS]
    if unknown:
        raise InvalidInput("on", f"unknown event {unknown[0]!r}; use {', '.join(EVENTS)}")
    return tuple(e for e in EVENTS if e in names)


def redact_url(url: str) -> str:
    """The URL without credentials, query or fragment: webhook URLs often carry a token
    (Slack's path does too, so only scheme, host and the path's first segment stay)."""
    if url.startswith(MAILTO):
        return url  # an email rule's recipients: addresses, no token
    parts = urlsplit(url)
    host = parts.hostname or ""
    if parts.port is not None:
        host = f"{host}:{parts.port}"
    first = parts.path.strip("/").split("/", 1)[0]
    hidden = "/..." if parts.path.strip("/").count("/") or parts.query else ""
    return f"{parts.scheme}://{host}/{first}{hidden}" if first else f"{parts.scheme}://{host}/"


@dataclass(frozen=True)
class AlertEvent:
    """One event of the outbox; ``id`` is stable across retries and nodes."""

    id: str
    event: str
    tenant: str
    job: str
    slot: datetime | None
    attempt: int | None
    node: str | None
    zone: str | None
    error: str | None
    detail: str | None
    created_at: datetime

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> AlertEvent:
        return cls(
            id=str(row["id"]),
            event=row["event"],
            tenant=row["tenant_id"],
            job=row["job_name"],
            slot=row["slot"],
            attempt=row["attempt"],
            node=row["node_id"],
            zone=row["zone"],
            error=row["error"],
            detail=row["detail"],
            created_at=row["created_at"],
        )

    def summary(self) -> str:
        """One line a person can read, with no links."""
        slot = f" slot {self.slot.isoformat()}" if self.slot else ""
        where = f" on {self.node}" + (f" ({self.zone})" if self.zone else "") if self.node else ""
        text = f"Pulse: job {self.job} (tenant {self.tenant}){slot} {self.event}{where}"
        if self.detail:
            text += f": {self.detail}"
        elif self.error:
            text += f": {self.error.splitlines()[0] if self.error.strip() else ''}"
        return text[:1000]

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "event": self.event,
            "job": self.job,
            "tenant": self.tenant,
            "slot": self.slot.isoformat() if self.slot else None,
            "attempt": self.attempt,
            "node": self.node,
            "zone": self.zone,
            "error": self.error,
            "summary": self.summary(),
            "created_at": self.created_at.isoformat(),
        }


def body(event: AlertEvent, fmt: str) -> bytes:
    """The request body for a rule of format ``fmt``."""
    if fmt == "slack":
        return json.dumps({"text": event.summary()}, ensure_ascii=False).encode()
    return json.dumps(event.to_json(), ensure_ascii=False, sort_keys=True).encode()


def signature(payload: bytes, secret: str) -> str:
    """``sha256=<hex HMAC-SHA256 of the body>`` keyed by the secret."""
    digest = hmac.new(secret.encode(), payload, hashlib.sha256).hexdigest()
    return f"sha256={digest}"


def verify(payload: bytes, secret: str, header: str) -> bool:
    """What a receiver does with ``X-Pulse-Signature`` (constant-time comparison)."""
    return hmac.compare_digest(signature(payload, secret), header)


def signing_key(secret: str) -> bytes:
    """The HMAC key of a secret: ``whsec_<base64>`` is that base64's bytes (as Standard
    Webhooks libraries read it), any other secret its UTF-8 bytes. ``ValueError`` for a
    ``whsec_`` secret that is not base64, without the secret."""
    if not secret.startswith(SECRET_PREFIX):
        return secret.encode()
    try:
        return base64.b64decode(secret[len(SECRET_PREFIX) :], validate=True)
    except (binascii.Error, ValueError):
        raise ValueError("the signing secret starts with whsec_ but is not base64") from None


def standard_signature(payload: bytes, secret: str, message_id: str, timestamp: int) -> str:
    """``v1,<base64 HMAC-SHA256 of "{id}.{timestamp}.{body}">`` (Standard Webhooks)."""
    signed = f"{message_id}.{timestamp}.".encode() + payload
    digest = hmac.new(signing_key(secret), signed, hashlib.sha256).digest()
    return "v1," + base64.b64encode(digest).decode()
