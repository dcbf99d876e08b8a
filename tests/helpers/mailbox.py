"""A real SMTP receiver for the email alert tests (aiosmtpd on 127.0.0.1): plain, STARTTLS
(required before MAIL) or implicit TLS, with AUTH when a user is given, recording every
message it accepts. ``certificate`` makes a self-signed certificate for 127.0.0.1 with the
``openssl`` command; a sender trusts it through ``SSL_CERT_FILE``."""

from __future__ import annotations

import contextlib
import email
import email.policy
import socket
import ssl
import subprocess
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from email.message import EmailMessage
from pathlib import Path
from typing import Any

from aiosmtpd.controller import Controller
from aiosmtpd.smtp import AuthResult, LoginPassword

HOST = "127.0.0.1"
IMPLICIT_TLS_WARNING = "ignore:Requiring AUTH while not requiring TLS:UserWarning"


@dataclass(frozen=True)
class Mail:
    sender: str
    recipients: tuple[str, ...]
    message: EmailMessage
    authenticated_as: str | None
    tls: bool  # the session ran over TLS (STARTTLS or implicit)


def certificate(folder: Path) -> tuple[Path, Path]:
    """A self-signed certificate and its key, valid for the IP address 127.0.0.1."""
    cert, key = folder / "smtp-cert.pem", folder / "smtp-key.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
         "-keyout", str(key), "-out", str(cert), "-subj", f"/CN={HOST}",
         "-addext", f"subjectAltName=IP:{HOST}"],
        check=True, capture_output=True, timeout=60,
    )  # fmt: skip
    return cert, key


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind((HOST, 0))
        port: int = probe.getsockname()[1]
        return port


@dataclass
class Mailbox:
    tls: str = "none"  # none | starttls | tls, as smtp.tls
    user: str | None = None
    password: str | None = None
    cert: tuple[Path, Path] | None = None
    mails: list[Mail] = field(default_factory=list)
    port: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _controller: Controller | None = None

    def _authenticate(
        self, server: Any, session: Any, envelope: Any, mechanism: str, auth_data: Any
    ) -> AuthResult:
        ok = (
            isinstance(auth_data, LoginPassword)
            and auth_data.login.decode() == self.user
            and auth_data.password.decode() == self.password
        )
        return AuthResult(success=ok, handled=False, auth_data=auth_data)

    async def handle_DATA(self, server: Any, session: Any, envelope: Any) -> str:
        message = email.message_from_bytes(envelope.content, policy=email.policy.default)
        assert isinstance(message, EmailMessage)
        login = session.auth_data.login if session.authenticated else None
        found = Mail(
            sender=envelope.mail_from,
            recipients=tuple(envelope.rcpt_tos),
            message=message,
            authenticated_as=login.decode() if isinstance(login, bytes) else None,
            tls=self.tls == "tls" or session.ssl is not None,
        )
        with self._lock:
            self.mails.append(found)
        return "250 Message accepted for delivery"

    def start(self) -> Mailbox:
        context = None
        if self.tls != "none":
            assert self.cert is not None, "a TLS mailbox needs a certificate"
            context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
            context.load_cert_chain(*map(str, self.cert))
        self.port = _free_port()
        kwargs: dict[str, Any] = {
            "authenticator": self._authenticate if self.user else None,
            "auth_required": bool(self.user),
            # Implicit TLS is TLS from the first byte; plain is for the refusal tests.
            "auth_require_tls": self.tls == "starttls",
        }
        if self.tls == "starttls":
            kwargs.update(tls_context=context, require_starttls=True)
        elif self.tls == "tls":
            kwargs.update(ssl_context=context)
        # With implicit TLS, aiosmtpd warns of AUTH without STARTTLS on every connection
        # (it cannot tell the session is TLS already): IMPLICIT_TLS_WARNING filters it.
        self._controller = Controller(self, hostname=HOST, port=self.port, **kwargs)
        self._controller.start()
        return self

    def stop(self) -> None:
        controller, self._controller = self._controller, None
        if controller is not None:
            controller.stop()

    def received(self) -> list[Mail]:
        with self._lock:
            return list(self.mails)


@contextlib.contextmanager
def mailbox(**kwargs: Any) -> Iterator[Mailbox]:
    box = Mailbox(**kwargs).start()
    try:
        yield box
    finally:
        box.stop()
