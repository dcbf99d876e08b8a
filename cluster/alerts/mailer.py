"""Sending an ``email`` rule's alert: a plain-text message through the cluster's SMTP server
(``cluster.config.mailserver``), with STARTTLS, implicit TLS or, for a local relay, none.

The server's host is resolved once and every address checked against the egress policy,
as a webhook's is (``cluster.outbound``); the connection goes to a checked address while
TLS still checks the certificate against the configured host name, so a DNS answer that
changes between check and connect cannot move it. The password comes from the sending
node's environment (``smtp.password`` names the variable) and appears in no error: an
``Answer`` says what the server replied, for the delivery's last error and the log.
``Message-ID`` is derived from the event id and the rule, the same on every retry, so a
mail system can drop a repeat. Guarded by tests/integration/test_alert_formats.py.
"""

from __future__ import annotations

import asyncio
import smtplib
import socket
import ssl
from collections.abc import Sequence
from email.message import EmailMessage
from email.utils import format_datetime

import httpx

from cluster.alerts.rules import AlertEvent
from cluster.alerts.webhook import MAX_ERROR_LENGTH, Answer
from cluster.config.egress import EgressPolicy, refused_message
from cluster.config.mailserver import MailServer
from cluster.outbound.transport import resolve

SENT = 250  # the SMTP reply that accepted the message


def message(rule: str, event: AlertEvent, sender: str, recipients: Sequence[str]) -> EmailMessage:
    """The alert as a plain-text message: the summary as subject, every field in the body."""
    mail = EmailMessage()
    subject = " ".join(event.summary().split())
    mail["Subject"] = subject[:200]
    mail["From"] = sender
    mail["To"] = ", ".join(recipients)
    mail["Date"] = format_datetime(event.created_at)
    mail["Message-ID"] = f"<{event.id}.{rule}@pulse>"
    mail["Auto-Submitted"] = "auto-generated"
    mail["X-Pulse-Event"] = event.event
    lines = [event.summary(), ""]
    for key, value in event.to_json().items():
        if key != "summary" and value is not None:
            lines.append(f"{key}: {value}")
    lines += ["", f"Sent by Pulse for alert rule {rule}."]
    mail.set_content("\n".join(lines) + "\n")
    return mail


class _Pinned(smtplib.SMTP):
    """Connects to ``address`` (checked) while ``host`` stays the name STARTTLS verifies.
    ``_get_socket`` is the hook ``smtplib.SMTP_SSL`` itself overrides."""

    def __init__(self, address: str, host: str, port: int, timeout_s: float) -> None:
        self._address = address
        super().__init__(host, port, timeout=timeout_s)

    def _get_socket(self, host: str, port: int, timeout: float) -> socket.socket:
        return socket.create_connection((self._address, port), timeout)


class _PinnedTLS(smtplib.SMTP_SSL):
    """Implicit TLS to ``address``, the certificate checked against ``host``."""

    def __init__(self, address: str, host: str, port: int, timeout_s: float) -> None:
        self._address = address
        context = ssl.create_default_context()
        super().__init__(host, port, timeout=timeout_s, context=context)

    def _get_socket(self, host: str, port: int, timeout: float) -> socket.socket:
        connection = socket.create_connection((self._address, port), timeout)
        return self.context.wrap_socket(connection, server_hostname=host)


def _client(server: MailServer, address: str, timeout_s: float) -> smtplib.SMTP:
    kind = _PinnedTLS if server.tls == "tls" else _Pinned
    return kind(address, server.host, server.port, timeout_s)


def _send(
    server: MailServer, address: str, password: str | None, mail: EmailMessage, timeout_s: float
) -> None:
    with _client(server, address, timeout_s) as client:
        client.ehlo()
        if server.tls == "starttls":
            client.starttls(context=ssl.create_default_context())
            client.ehlo()
        if server.user:
            client.login(server.user, password or "")
        client.send_message(mail)


def _reason(exc: BaseException, password: str | None) -> str:
    if isinstance(exc, smtplib.SMTPResponseException):
        text = (
            exc.smtp_error.decode("utf-8", "replace")
            if isinstance(exc.smtp_error, bytes)
            else str(exc.smtp_error)
        )
        line = f"SMTP {exc.smtp_code} {' '.join(text.split())}"
    elif isinstance(exc, smtplib.SMTPRecipientsRefused):
        line = f"SMTP refused every recipient ({', '.join(sorted(exc.recipients))})"
    else:
        line = f"{type(exc).__name__}: {' '.join(str(exc).split())}".rstrip(": ")
    if password:
        line = line.replace(password, "***")
    return line[:MAX_ERROR_LENGTH]


async def send(
    server: MailServer,
    mail: EmailMessage,
    *,
    password: str | None,
    policy: EgressPolicy,
    timeout_s: float,
) -> Answer:
    """Send ``mail`` within ``timeout_s`` in all (resolving included, so an attempt ends
    well within the outbox's lease); never raises for what the network or server does."""
    try:
        async with asyncio.timeout(timeout_s):
            return await _checked_send(server, mail, password, policy, timeout_s)
    except TimeoutError:
        return _silent(server, timeout_s)


def _silent(server: MailServer, timeout_s: float) -> Answer:
    return Answer(None, f"no answer from {server.host}:{server.port} within {timeout_s:g}s")


async def _checked_send(
    server: MailServer,
    mail: EmailMessage,
    password: str | None,
    policy: EgressPolicy,
    timeout_s: float,
) -> Answer:
    try:
        addresses = await resolve(server.host, server.port)
    except httpx.ConnectError as exc:
        return Answer(None, str(exc))
    allowed = [a for a in addresses if policy.refusal(a) is None]
    if not allowed:
        if not addresses:
            return Answer(None, f"cannot resolve {server.host}: no address")
        first = addresses[0]
        return Answer(None, refused_message(server.host, first, policy.refusal(first) or ""))
    if server.user and server.tls == "none" and not allowed[0].is_loopback:
        # A login over plain SMTP hands the password to every network hop on the way.
        return Answer(
            None,
            f"refusing to log in to {server.host} without TLS: set smtp.tls starttls or tls "
            "(smtp.tls none logs in only to a relay on loopback)",
        )
    try:
        await asyncio.to_thread(_send, server, str(allowed[0]), password, mail, timeout_s)
    except TimeoutError:  # the socket's own timeout, the same limit
        return _silent(server, timeout_s)
    except (smtplib.SMTPException, OSError, ssl.SSLError) as exc:
        return Answer(None, _reason(exc, password))
    return Answer(SENT, None)
