"""Every key of the cluster's ``config`` table (``pulse config``), its default and how its
value is checked: the retention keys (``cluster.config.retention``), the API's handler
allow-list (``cluster.config.allowlist``) and the variables it may name
(``cluster.config.envlist``)."""

from __future__ import annotations

from cluster.config import allowlist, envlist, retention
from cluster.errors import InvalidInput

KEYS = (*retention.KEYS, allowlist.API_HANDLERS, envlist.API_ENV)


def defaults() -> dict[str, str]:
    return {**retention.Retention().to_config(), allowlist.API_HANDLERS: "", envlist.API_ENV: ""}


def canonical(key: str, text: str) -> str:
    """``text`` checked as the value of ``key``, in its stored form; ``InvalidInput`` naming
    the key if either is bad."""
    if key == allowlist.API_HANDLERS:
        return allowlist.canonical(text)
    if key == envlist.API_ENV:
        return envlist.canonical(text)
    if key not in retention.KEYS:
        raise InvalidInput(key, f"unknown config key; use one of {', '.join(KEYS)}")
    return retention.canonical(key, text)
