"""API tokens and console sessions: the secrets a caller presents, their stored hashes,
roles and the CSRF token of a console session.

A token is ``pulse_`` and 32 random bytes (URL-safe base64); a session id, which only the
console's cookie carries, is 32 random bytes too. Postgres keeps only their SHA-256: the
secrets are high-entropy, so no salt or slow hash is needed, and a hash finds the row with
one indexed lookup. The console's CSRF token is an HMAC keyed with the session id, so any
replica can check it without shared state, and knowing it tells nothing of the id.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets

from cluster.errors import InvalidInput

PREFIX = "pulse_"
ROLES = ("read", "write", "admin")  # each may do what the ones before it may


def new_token() -> str:
    return PREFIX + secrets.token_urlsafe(32)


def new_session_id() -> str:
    return secrets.token_urlsafe(32)


def token_hash(token: str) -> bytes:
    """The stored form of a token or a session id."""
    return hashlib.sha256(token.encode("utf-8", "replace")).digest()


def csrf_token(session_id: str) -> str:
    """The CSRF token of the console session ``session_id``."""
    key = session_id.encode("utf-8", "replace")
    return hmac.new(key, b"pulse-csrf", hashlib.sha256).hexdigest()


def csrf_matches(session_id: str, presented: str | None) -> bool:
    # bytes: compare_digest refuses str with non-ASCII characters (a header may hold them)
    return presented is not None and hmac.compare_digest(
        csrf_token(session_id).encode(), presented.encode("utf-8", "replace")
    )


def check_role(role: str) -> str:
    if role not in ROLES:
        raise InvalidInput("role", f"must be one of {', '.join(ROLES)}, got {role!r}")
    return role


def allows(role: str, needed: str) -> bool:
    """Whether a token of ``role`` may do what needs ``needed``."""
    return ROLES.index(role) >= ROLES.index(needed)
