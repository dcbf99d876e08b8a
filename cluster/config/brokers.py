"""Celery brokers by name: the ``celery.brokers`` config key
(``pulse config set celery.brokers 'main=${env:CELERY_MAIN_URL},reports=redis://b:6379/1'``).

A ``celery:`` job may name a broker (``"broker": "main"``) instead of giving its URL; the
node looks the name up here at run time, so a job written over the HTTP API (which must
name one) never chooses where a node connects, nor learns a broker's password. A literal
password in a URL is refused: it would sit in the ``config`` table and in ``pulse config
show``; write it ``${env:NAME}`` and set the variable on the nodes.
"""

from __future__ import annotations

import re
from urllib.parse import urlsplit

from cluster.errors import InvalidInput
from cluster.jobs.handlerrefs import is_broker_name

CELERY_BROKERS = "celery.brokers"
DEFAULTS = {CELERY_BROKERS: ""}
_ENV_REF = re.compile(r"\$\{env:[A-Za-z_][A-Za-z0-9_]*\}")


def _check_url(name: str, url: str) -> None:
    if _ENV_REF.fullmatch(url):
        return
    if "://" not in url:
        raise InvalidInput(CELERY_BROKERS, f"{name}: must be a URL or ${{env:NAME}}")
    try:
        password = urlsplit(url).password
    except ValueError as exc:
        raise InvalidInput(CELERY_BROKERS, f"{name}: not a URL ({exc})") from exc
    if password and not _ENV_REF.fullmatch(password):
        raise InvalidInput(
            CELERY_BROKERS, f"{name}: a literal password in a URL; write it ${{env:NAME}}"
        )


def parse(text: str) -> dict[str, str]:
    """Names to URLs (``${env:...}`` unresolved); ``InvalidInput`` naming the key."""
    if not isinstance(text, str):
        raise InvalidInput(CELERY_BROKERS, "must be text")
    found: dict[str, str] = {}
    for item in (part.strip() for part in text.split(",")):
        if not item:
            continue
        name, sep, url = (p.strip() for p in item.partition("="))
        if not sep or not is_broker_name(name):
            raise InvalidInput(CELERY_BROKERS, "entries are name=URL (a name like 'main')")
        if name in found:
            raise InvalidInput(CELERY_BROKERS, f"{name}: named twice")
        if any(ord(ch) < 32 for ch in url):
            raise InvalidInput(CELERY_BROKERS, f"{name}: control characters in the URL")
        _check_url(name, url)
        found[name] = url
    return found


def canonical(text: str) -> str:
    return ",".join(f"{name}={url}" for name, url in parse(text).items())


CHECKS = {CELERY_BROKERS: canonical}
