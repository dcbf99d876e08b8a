"""Sending one alert event to one rule, whatever its format: a webhook POST (``json``,
``slack``), a PagerDuty Events API v2 event (``pagerduty``) or a message through the
cluster's SMTP server (``email``). A node delivering the outbox and ``pulse alerts test``
both send through here, so what a test event proves is what delivery does.

Secrets (a signing secret, a routing key, the SMTP password) are read by their variable's
name from the sender's environment at send time; a missing one raises ``MissingVariable``
naming the variable, never a value, and the outbox leaves the delivery for a node that has
it.
"""

from __future__ import annotations

from collections.abc import Mapping

import httpx

from cluster.alerts import mailer, pagerduty
from cluster.alerts.rules import AlertEvent, AlertRule, body
from cluster.alerts.webhook import DEFAULT_TIMEOUT_S, Answer, post
from cluster.config.egress import EgressPolicy
from cluster.config.mailserver import MailServer
from cluster.errors import InvalidInput


class MissingVariable(LookupError):
    """The sender has no value for the variable a rule (or ``smtp.password``) names."""

    def __init__(self, name: str) -> None:
        super().__init__(f"${name} is not set")
        self.name = name


def _variable(environ: Mapping[str, str], name: str | None) -> str | None:
    if name is None:
        return None
    value = environ.get(name) or None
    if value is None:
        raise MissingVariable(name)
    return value


async def send(
    client: httpx.AsyncClient,
    rule: AlertRule,
    event: AlertEvent,
    *,
    environ: Mapping[str, str],
    config: Mapping[str, str],
    timeout_s: float = DEFAULT_TIMEOUT_S,
) -> Answer:
    """Send ``event`` as ``rule`` says; never raises for what the receiver does."""
    if rule.format == "email":
        try:
            server = MailServer.from_config(config)
        except InvalidInput as exc:
            return Answer(None, f"email not sent: {exc}")
        password = _variable(environ, server.password_env)
        mail = mailer.message(rule.name, event, server.sender, rule.recipients)
        policy = EgressPolicy.from_config(dict(config))
        return await mailer.send(
            server, mail, password=password, policy=policy, timeout_s=timeout_s
        )
    secret = _variable(environ, rule.secret_env)
    if rule.format == "pagerduty":
        assert secret is not None  # a pagerduty rule always names its routing key
        payload = pagerduty.body(rule.name, event, secret)
        return await post(
            client, rule.url, payload, event_id=event.id, secret=None, timeout_s=timeout_s
        )
    payload = body(event, rule.format)
    return await post(
        client,
        rule.url,
        payload,
        event_id=event.id,
        secret=secret,
        timeout_s=timeout_s,
        legacy_signature=rule.legacy_signature,
    )
