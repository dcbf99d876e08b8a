"""Every key of the cluster's ``config`` table (``pulse config``), its default and how its
value is checked: the retention keys (``cluster.config.retention``), the API's handler
allow-list (``cluster.config.allowlist``) and the variables it may name
(``cluster.config.envlist``), the egress guard and kept bodies (``cluster.config.egress``)
Celery brokers by name (``cluster.config.brokers``) and the SMTP server of email alerts
(``cluster.config.mailserver``)."""

from __future__ import annotations

from collections.abc import Callable

from cluster.config import allowlist, brokers, egress, envlist, mailserver, retention
from cluster.errors import InvalidInput

_CHECKS: dict[str, Callable[[str], str]] = {
    allowlist.API_HANDLERS: allowlist.canonical,
    envlist.API_ENV: envlist.canonical,
    **egress.CHECKS,
    **brokers.CHECKS,
    **mailserver.CHECKS,
}
KEYS = (*retention.KEYS, *_CHECKS)
# Keys whose values may go into an audit row. Listed by name, not derived from KEYS: a key
# added later (one holding a URL with a password, say) is audited without its value until
# someone decides it holds no secret.
_SHOWN_IN_AUDIT = frozenset(
    (
        *retention.KEYS,
        allowlist.API_HANDLERS,
        envlist.API_ENV,
        *egress.CHECKS,
        *mailserver.SHOWN_IN_AUDIT,
    )
)


def defaults() -> dict[str, str]:
    return {
        **retention.Retention().to_config(),
        allowlist.API_HANDLERS: "",
        envlist.API_ENV: "",
        **egress.DEFAULTS,
        **brokers.DEFAULTS,
        **mailserver.DEFAULTS,
    }


def canonical(key: str, text: str) -> str:
    """``text`` checked as the value of ``key``, in its stored form; ``InvalidInput`` naming
    the key if either is bad."""
    if key in _CHECKS:
        return _CHECKS[key](text)
    if key not in retention.KEYS:
        raise InvalidInput(key, f"unknown config key; use one of {', '.join(KEYS)}")
    return retention.canonical(key, text)


def audit_text(key: str, stored: str) -> str:
    """What the audit row of ``pulse config set KEY`` says: the value only for a key known
    to hold no secret."""
    if key in _SHOWN_IN_AUDIT:
        return f"{key} = {stored}"
    return f"{key} changed (value not recorded)"
