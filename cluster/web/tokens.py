"""API tokens: the secret a caller presents, its stored hash, roles and the CSRF token of a
console session.

A token is ``pulse_`` and 32 random bytes (URL-safe base64). Postgres keeps only its
SHA-256: the secret is high-entropy, so no salt or slow hash is needed, and a hash lets the
API find the token with one indexed lookup. The console's CSRF token is derived from the
session's secret, so any replica can check it without shared state.
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


def token_hash(token: str) -> bytes:
    return hashlib.sha256(token.encode("utf-8", "replace")).digest()


def csrf_token(token: str) -> str:
    """The CSRF token of the console session whose cookie holds ``token``."""
    return hmac.new(token.encode("utf-8", "replace"), b"pulse-csrf", hashlib.sha256).hexdigest()


def csrf_matches(token: str, presented: str | None) -> bool:
    return presented is not None and hmac.compare_digest(csrf_token(token), presented)


def check_role(role: str) -> str:
    if role not in ROLES:
        raise InvalidInput("role", f"must be one of {', '.join(ROLES)}, got {role!r}")
    return role


def allows(role: str, needed: str) -> bool:
    """Whether a token of ``role`` may do what needs ``needed``."""
    return ROLES.index(role) >= ROLES.index(needed)
