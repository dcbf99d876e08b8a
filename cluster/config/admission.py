"""What the HTTP API does with a job's handler before it writes the job: the stored form it
gets, or why it is refused (docs/design/api-handlers.md).

- Python (``module:function``): named exactly in ``api.handlers``, or registered by a
  ``Registry`` the nodes loaded (for a tenant-scoped token, one of its tenant). Nothing is
  imported here.
- ``shell:``: split into argv and stored in the argv form, so it runs with exec and no
  shell; shell syntax is refused; the argv must match a ``shell:`` entry token by token.
- ``http:``: the URL must be unambiguous and inside an ``http:`` entry.
- ``celery:``: the task must match a ``celery:`` entry.
- Every ``${env:NAME}`` in the handler and every name in a shell ``env`` list must match
  ``api.env``.

Refusals are ``NotAllowed`` (HTTP 403); malformed input is ``InvalidInput`` (422).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from cluster.config.allowlist import API_HANDLERS, AllowList
from cluster.config.envlist import API_ENV, EnvAllowList
from cluster.config.httprules import job_url
from cluster.errors import InvalidInput
from cluster.jobs import handlerrefs, shellrefs
from cluster.jobs.handlerrefs import CeleryTarget, HttpTarget

# Wider than what a node resolves, so no spelling of a reference slips past the check.
_ENV_REF = re.compile(r"\$\{env:([^}]*)\}")


class NotAllowed(InvalidInput):
    """Well-formed, but not something the cluster lets the API write."""


@dataclass(frozen=True)
class ApiPolicy:
    handlers: AllowList
    env: EnvAllowList
    registered: frozenset[str]  # Python handlers registries offer to this token


def admit(handler: str, policy: ApiPolicy, field: str = "handler") -> str:
    """``handler`` (a validated, stored-form reference) as the API stores it."""
    for name in _ENV_REF.findall(handler):
        _check_env(name, policy.env, field)
    if shellrefs.is_shell(handler):
        found = shellrefs.split_for_api(shellrefs.parse(handler), field)
        for name in found.env:
            _check_env(name, policy.env, f"{field}.env")
        assert found.argv is not None
        if not policy.handlers.allows_shell(found.argv):
            _refuse(field, f"the command {_short(' '.join(found.argv))!r}", policy.handlers)
        return found.encode()
    if handlerrefs.is_forwarded(handler):
        target = handlerrefs.parse(handler)
        if isinstance(target, HttpTarget):
            job_url(target.url, f"{field}.url")
            if not policy.handlers.allows_http(target.method, target.url):
                _refuse(field, f"{target.method} {_short(target.url)!r}", policy.handlers)
        elif isinstance(target, CeleryTarget) and not policy.handlers.allows_celery(target.task):
            _refuse(field, f"the celery task {target.task!r}", policy.handlers)
        return handler
    if not (policy.handlers.allows_python(handler) or handler in policy.registered):
        raise NotAllowed(
            field,
            f"{_short(handler)!r} is not registered by a pulsecron Registry of this tenant "
            f"(Registry.handler) nor named exactly in {API_HANDLERS}",
        )
    return handler


def _check_env(name: str, allowed: EnvAllowList, field: str) -> None:
    if not allowed.allows(name):
        raise NotAllowed(
            field,
            f"the variable {_short(name)!r} is not one the API may use "
            f"(pulse config set {API_ENV} ...; PULSE_* never)",
        )


def _refuse(field: str, what: str, allowed: AllowList) -> None:
    raise NotAllowed(
        field,
        f"{what} is not allowed through the API "
        f"(pulse config set {API_HANDLERS} ...; now: {_short(allowed.shown())})",
    )


def _short(text: str) -> str:
    return text if len(text) <= 80 else text[:77] + "..."
