"""The SMTP server email alert rules are sent through: the ``smtp.*`` config keys
(``pulse config set smtp.host mail.example.com``).

``smtp.tls`` is ``starttls`` (the default: plain connection upgraded before anything is
sent, port 587), ``tls`` (implicit TLS, port 465) or ``none`` (plain, for a relay on the
same host or network). ``smtp.password`` is only ever ``${env:NAME}``: a literal would sit
in the ``config`` table and in ``pulse config show``; each node reads its own variable
when it sends. Certificates are checked against the system's CA store (``SSL_CERT_FILE``
names another bundle).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from email.headerregistry import Address as MailAddress
from email.utils import parseaddr

from cluster.errors import InvalidInput

SMTP_HOST = "smtp.host"
SMTP_PORT = "smtp.port"
SMTP_TLS = "smtp.tls"
SMTP_USER = "smtp.user"
SMTP_PASSWORD = "smtp.password"
SMTP_FROM = "smtp.from"
TLS_MODES = ("starttls", "tls", "none")
DEFAULT_PORTS = {"starttls": 587, "tls": 465, "none": 25}
DEFAULTS = {
    SMTP_HOST: "",
    SMTP_PORT: "",
    SMTP_TLS: "starttls",
    SMTP_USER: "",
    SMTP_PASSWORD: "",
    SMTP_FROM: "",
}
ENV_REF = re.compile(r"^\$\{env:([A-Za-z_][A-Za-z0-9_]*)\}$")
_HOST = re.compile(r"^[A-Za-z0-9._:\[\]-]+$")


def mail_address(text: str, field_name: str) -> str:
    """One plain address (``ops@example.com``); ``InvalidInput`` naming the field."""
    if not isinstance(text, str) or any(ord(ch) < 32 for ch in text):
        raise InvalidInput(field_name, "must be an email address on one line")
    _name, address = parseaddr(text.strip())
    if not address or address != text.strip():
        raise InvalidInput(field_name, f"{text.strip()!r} is not an email address")
    try:
        found = MailAddress(addr_spec=address)
    except (ValueError, IndexError) as exc:
        raise InvalidInput(field_name, f"{address!r} is not an email address") from exc
    if not found.username or not found.domain:
        raise InvalidInput(field_name, f"{address!r} is not an email address")
    return address


def _host(text: str) -> str:
    text = text.strip()
    if text and not _HOST.match(text):
        raise InvalidInput(SMTP_HOST, f"{text!r} is not a host name or address")
    return text


def _port(text: str) -> str:
    text = text.strip()
    if text and (not text.isdigit() or not 0 < int(text) < 65536):
        raise InvalidInput(SMTP_PORT, "must be a port number (1-65535), or empty for the default")
    return text


def _tls(text: str) -> str:
    if text.strip() not in TLS_MODES:
        raise InvalidInput(SMTP_TLS, f"{text.strip()!r}: use {', '.join(TLS_MODES)}")
    return text.strip()


def _user(text: str) -> str:
    if any(ord(ch) < 32 for ch in text):
        raise InvalidInput(SMTP_USER, "must not contain control characters")
    return text.strip()


def _password(text: str) -> str:
    text = text.strip()
    if text and not ENV_REF.match(text):
        raise InvalidInput(
            SMTP_PASSWORD, "write it ${env:NAME} and set NAME on the nodes (never the password)"
        )
    return text


def _sender(text: str) -> str:
    return mail_address(text, SMTP_FROM) if text.strip() else ""


CHECKS = {
    SMTP_HOST: _host,
    SMTP_PORT: _port,
    SMTP_TLS: _tls,
    SMTP_USER: _user,
    SMTP_PASSWORD: _password,
    SMTP_FROM: _sender,
}
# Shown in audit rows: the password key holds only a variable's name, but is left out anyway.
SHOWN_IN_AUDIT = (SMTP_HOST, SMTP_PORT, SMTP_TLS, SMTP_USER, SMTP_FROM)


@dataclass(frozen=True)
class MailServer:
    host: str
    port: int
    tls: str
    user: str
    password_env: str | None  # the NAME of the nodes' variable holding the password
    sender: str

    @classmethod
    def from_config(cls, values: Mapping[str, str]) -> MailServer:
        """From the ``config`` table; ``InvalidInput`` naming what is missing or bad."""
        host = _host(values.get(SMTP_HOST, ""))
        if not host:
            raise InvalidInput(SMTP_HOST, "not set (pulse config set smtp.host HOST)")
        sender = _sender(values.get(SMTP_FROM, ""))
        if not sender:
            raise InvalidInput(SMTP_FROM, "not set (pulse config set smtp.from ADDRESS)")
        tls = _tls(values.get(SMTP_TLS, "") or "starttls")
        port = _port(values.get(SMTP_PORT, ""))
        password = ENV_REF.match(_password(values.get(SMTP_PASSWORD, "")))
        return cls(
            host=host.strip("[]"),
            port=int(port) if port else DEFAULT_PORTS[tls],
            tls=tls,
            user=_user(values.get(SMTP_USER, "")),
            password_env=password[1] if password else None,
            sender=sender,
        )
