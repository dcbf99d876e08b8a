"""The ``pagerduty`` and ``email`` alert formats through the delivery service, against a real
Postgres, a real HTTP receiver standing in for PagerDuty's Events API and a real SMTP
server (aiosmtpd): plain, STARTTLS with AUTH, and implicit TLS with a self-signed
certificate made here. Secrets (the routing key, the SMTP password) stay on the node."""

from __future__ import annotations

import json
import logging
import socket
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import psycopg
import pytest

from cluster.alerts.rules import AlertRule
from cluster.config.egress import EGRESS_ALLOW
from cluster.errors import InvalidInput
from cluster.settings import ClusterSettings
from cluster.store.housekeeping.alerts import AlertStore
from cluster.store.jobstore.store import JobStore
from node.maintenance.outbox import AlertDelivery
from node.stats import Stats
from tests.helpers.cli import Invoke, assert_bad_input, assert_one_line_error
from tests.helpers.mailbox import HOST, IMPLICIT_TLS_WARNING, certificate, mailbox
from tests.helpers.outbox import T0, add_rule, at, events, every_10s, run_slot, sql
from tests.helpers.receiver import receiver
from tests.helpers.sessions import Opener

pytestmark = [pytest.mark.timeout(60), pytest.mark.filterwarnings(IMPLICIT_TLS_WARNING)]
ROUTING_KEY = "R0UTING-KEY-0123456789abcdef"
PASSWORD = "smtp-pa55word-xyz"
SENDER = "pulse@example.com"


@pytest.fixture
async def alerts(settings: ClusterSettings) -> Any:
    async with AlertStore.open(settings, "n1/alerts") as store:
        yield store


def service(
    alerts: AlertStore, config: Mapping[str, str], environ: Mapping[str, str]
) -> AlertDelivery:
    async def values() -> Mapping[str, str]:
        return config

    return AlertDelivery(alerts, "n1", Stats(), environ=environ, config=values)


async def drain(deliver: AlertDelivery) -> None:
    """Run the service until it has nothing due (one job's events go out one by one)."""
    for _ in range(10):
        if await deliver.run_once() is None:
            return
    raise AssertionError("the outbox did not drain in 10 passes")


async def fail_then_recover(store: JobStore, open_session: Opener) -> None:
    """Job ``a`` fails its slot at 10 s (``failed``), then succeeds at 20 s (``recovered``)."""
    await store.definitions.apply([every_10s("a")], now=T0)
    node = await open_session("n0")
    await run_slot(node, at(10), "failed", "boom at 10")
    await run_slot(node, at(20), "succeeded")


# -- pagerduty ---------------------------------------------------------------------------


async def test_pagerduty_triggers_then_resolves_one_incident_per_rule_and_job(
    store: JobStore,
    settings: ClusterSettings,
    open_session: Opener,
    alerts: AlertStore,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)
    with receiver(status=202) as r:
        await add_rule(settings, "pd", r.url, format="pagerduty", secret_env="PD_KEY")
        await fail_then_recover(store, open_session)
        config = {EGRESS_ALLOW: "127.0.0.0/8"}
        await drain(service(alerts, config, {"PD_KEY": ROUTING_KEY}))
        trigger, resolve = r.received()
    assert [e["status"] for e in await events(settings)] == ["delivered", "delivered"]
    sent = trigger.json()
    assert (sent["event_action"], sent["routing_key"]) == ("trigger", ROUTING_KEY)
    assert sent["dedup_key"] == "pulse/pd/default/a"
    assert sent["payload"]["severity"] == "error"
    assert sent["payload"]["summary"].startswith("Pulse: job a (tenant default)")
    assert (sent["payload"]["component"], sent["payload"]["class"]) == ("a", "failed")
    assert sent["payload"]["custom_details"]["error"] == "boom at 10"
    assert resolve.json() == {
        "routing_key": ROUTING_KEY,
        "event_action": "resolve",
        "dedup_key": "pulse/pd/default/a",
    }
    assert trigger.headers["Content-Type"] == "application/json"
    assert "webhook-signature" not in trigger.headers  # the key routes, it does not sign
    pulse_lines = [r.getMessage() for r in caplog.records if r.name.startswith(("node", "cluster"))]
    assert pulse_lines and not any(ROUTING_KEY in line for line in pulse_lines)


async def test_pagerduty_without_its_routing_key_waits_for_a_node_that_has_it(
    store: JobStore, settings: ClusterSettings, open_session: Opener, alerts: AlertStore
) -> None:
    with receiver(status=202) as r:
        await add_rule(settings, "pd", r.url, format="pagerduty", secret_env="PD_KEY")
        await fail_then_recover(store, open_session)
        assert await service(alerts, {EGRESS_ALLOW: "127.0.0.0/8"}, {}).run_once() is None
        assert r.received() == []
    first = (await events(settings))[0]
    assert (first["status"], first["attempts"]) == ("pending", 1)
    (row,) = [d for d in await alerts.deliveries("pending", 5) if d.event == "failed"]
    assert row.last_error == "$PD_KEY is not set on node n1"


async def test_a_refused_pagerduty_event_is_retried(
    store: JobStore, settings: ClusterSettings, open_session: Opener, alerts: AlertStore
) -> None:
    with receiver(status=429) as r:
        await add_rule(settings, "pd", r.url, format="pagerduty", secret_env="PD_KEY")
        await fail_then_recover(store, open_session)
        deliver = service(alerts, {EGRESS_ALLOW: "127.0.0.0/8"}, {"PD_KEY": ROUTING_KEY})
        assert await deliver.run_once() is None
        assert len(r.received()) == 1
    (row, *_) = (
        await alerts.deliveries("pending", 5)[::-1]
        if False
        else [d for d in await alerts.deliveries("pending", 5) if d.event == "failed"]
    )
    assert row.last_error is not None and row.last_error.startswith("HTTP 429")
    assert ROUTING_KEY not in row.last_error


def test_pagerduty_and_email_rules_are_checked() -> None:
    rule = AlertRule.build("pd", None, format="pagerduty", secret_env="PD_KEY")
    assert rule.url == "https://events.pagerduty.com/v2/enqueue"
    with pytest.raises(InvalidInput, match=r"^secret-env: a pagerduty rule names"):
        AlertRule.build("pd", None, format="pagerduty")
    mail = AlertRule.build("m", None, format="email", to=["ops@example.com", "b@example.org"])
    assert mail.recipients == ("ops@example.com", "b@example.org")
    assert mail.to_json()["to"] == ["ops@example.com", "b@example.org"]
    assert mail.to_json()["webhook"] is None
    for bad, field in (
        ({"to": None}, "to"),
        ({"to": "ops@example.com\r\nBcc: x@evil.example"}, "to"),
        ({"to": "not-an-address"}, "to"),
        ({"to": "a@example.com", "secret_env": "X"}, "secret-env"),
    ):
        with pytest.raises(InvalidInput, match=f"^{field}:"):
            AlertRule.build("m", None, format="email", **bad)
    with pytest.raises(InvalidInput, match=r"^webhook:"):
        AlertRule.build("m", "https://h/x", format="email", to="a@example.com")
    with pytest.raises(InvalidInput, match=r"^to:"):
        AlertRule.build("j", "https://h/x", to="a@example.com")


# -- email -------------------------------------------------------------------------------


def smtp_config(port: int, tls: str, user: str = "") -> dict[str, str]:
    return {
        EGRESS_ALLOW: "127.0.0.0/8",
        "smtp.host": HOST,
        "smtp.port": str(port),
        "smtp.tls": tls,
        "smtp.user": user,
        "smtp.password": "${env:SMTP_PASSWORD}" if user else "",
        "smtp.from": SENDER,
    }


@pytest.mark.parametrize("tls", ["none", "starttls", "tls"])
async def test_email_is_sent_plain_with_starttls_or_implicit_tls(
    tls: str,
    store: JobStore,
    settings: ClusterSettings,
    open_session: Opener,
    alerts: AlertStore,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)
    cert = certificate(tmp_path) if tls != "none" else None
    if cert is not None:
        monkeypatch.setenv("SSL_CERT_FILE", str(cert[0]))  # the node trusts the test's CA
    user = "" if tls == "none" else "pulse-alerts"
    with mailbox(tls=tls, user=user or None, password=PASSWORD, cert=cert) as box:
        await add_rule(
            settings, "mail", None, format="email", to="ops@example.com,oncall@example.org"
        )
        await fail_then_recover(store, open_session)
        environ = {"SMTP_PASSWORD": PASSWORD}
        await drain(service(alerts, smtp_config(box.port, tls, user), environ))
        failed, recovered = box.received()
    assert [e["status"] for e in await events(settings)] == ["delivered", "delivered"]
    assert failed.sender == SENDER
    assert failed.recipients == ("ops@example.com", "oncall@example.org")
    assert failed.tls is (tls != "none")
    assert failed.authenticated_as == (user or None)
    message = failed.message
    assert message["Subject"].startswith("Pulse: job a (tenant default) slot ")
    assert message["Subject"].endswith(" failed on n0 (z): boom at 10")
    assert message["To"] == "ops@example.com, oncall@example.org"
    (event, _) = await events(settings)
    assert message["Message-ID"] == f"<{event['id']}.mail@pulse>"
    text = message.get_content()
    assert "error: boom at 10" in text and "Sent by Pulse for alert rule mail." in text
    assert "recovered" in recovered.message["Subject"]
    pulse_lines = [r.getMessage() for r in caplog.records if r.name.startswith(("node", "cluster"))]
    assert pulse_lines and not any(PASSWORD in line for line in pulse_lines)


async def test_email_failures_are_retried_without_the_password(
    store: JobStore,
    settings: ClusterSettings,
    open_session: Opener,
    alerts: AlertStore,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    cert = certificate(tmp_path)
    await add_rule(settings, "mail", None, format="email", to="ops@example.com")
    await fail_then_recover(store, open_session)

    async def last_error(config: dict[str, str], environ: dict[str, str]) -> str:
        deliver = service(alerts, config, environ)
        await deliver.run_once(now=None)
        (row,) = [d for d in await alerts.deliveries("pending", 5) if d.event == "failed"]
        await sql(settings, "UPDATE alert_deliveries SET next_attempt_at = now() RETURNING id")
        assert row.last_error is not None
        return row.last_error

    with mailbox(tls="starttls", user="pulse-alerts", password=PASSWORD, cert=cert) as box:
        good = smtp_config(box.port, "starttls", "pulse-alerts")
        # Not trusted: the certificate is self-signed and SSL_CERT_FILE is not set.
        assert "CERTIFICATE_VERIFY_FAILED" in await last_error(good, {"SMTP_PASSWORD": PASSWORD})
        monkeypatch.setenv("SSL_CERT_FILE", str(cert[0]))
        wrong = await last_error(good, {"SMTP_PASSWORD": "wrong-" + PASSWORD})
        assert wrong.startswith("SMTP 535") and PASSWORD not in wrong
        assert await last_error(good, {}) == "$SMTP_PASSWORD is not set on node n1"
        closed = {**good, EGRESS_ALLOW: ""}
        assert await last_error(closed, {"SMTP_PASSWORD": PASSWORD}) == (
            "egress to 127.0.0.1 refused: loopback address (pulse config set egress.allow ...)"
        )
        unset = {**good, "smtp.host": ""}
        assert await last_error(unset, {"SMTP_PASSWORD": PASSWORD}) == (
            "email not sent: smtp.host: not set (pulse config set smtp.host HOST)"
        )
        assert box.received() == []


async def test_a_login_without_tls_is_refused_but_to_a_relay_on_loopback(
    store: JobStore,
    settings: ClusterSettings,
    open_session: Opener,
    alerts: AlertStore,
) -> None:
    await add_rule(settings, "mail", None, format="email", to="ops@example.com")
    await fail_then_recover(store, open_session)
    environ = {"SMTP_PASSWORD": PASSWORD}
    remote = {
        **smtp_config(2525, "none", "pulse-alerts"),
        "smtp.host": "192.0.2.2",
        EGRESS_ALLOW: "192.0.2.0/24",
    }
    await service(alerts, remote, environ).run_once(now=None)
    (row,) = [d for d in await alerts.deliveries("pending", 5) if d.event == "failed"]
    assert row.last_error == (
        "refusing to log in to 192.0.2.2 without TLS: set smtp.tls starttls or tls "
        "(smtp.tls none logs in only to a relay on loopback)"
    )
    await sql(settings, "UPDATE alert_deliveries SET next_attempt_at = now() RETURNING id")
    with mailbox(tls="none", user="pulse-alerts", password=PASSWORD) as box:
        await drain(service(alerts, smtp_config(box.port, "none", "pulse-alerts"), environ))
        assert [m.authenticated_as for m in box.received()] == ["pulse-alerts"] * 2


# -- the command line --------------------------------------------------------------------


@pytest.fixture
def pulse(initialised: Invoke) -> Invoke:
    pulse = initialised
    assert pulse("config", "set", "egress.allow", "127.0.0.0/8").exit_code == 0
    return pulse


def test_smtp_config_keeps_no_password_and_checks_every_key(
    pulse: Invoke, settings: ClusterSettings
) -> None:
    assert_bad_input(pulse("config", "set", "smtp.password", PASSWORD), "smtp.password")
    assert_bad_input(pulse("config", "set", "smtp.tls", "ssl"), "smtp.tls")
    assert_bad_input(pulse("config", "set", "smtp.port", "99999"), "smtp.port")
    assert_bad_input(pulse("config", "set", "smtp.from", "Pulse <p@x.example>"), "smtp.from")
    assert pulse("config", "set", "smtp.password", "${env:SMTP_PASSWORD}").exit_code == 0
    shown = pulse("config", "show")
    assert "${env:SMTP_PASSWORD}" in shown.stdout and PASSWORD not in shown.stdout
    with psycopg.connect(settings.database_url, autocommit=True) as conn:
        rows = conn.execute(f"SELECT value FROM {settings.schema}.config").fetchall()
    assert not any(PASSWORD in str(row) for row in rows)


def test_alerts_add_and_test_for_email_and_pagerduty(pulse: Invoke) -> None:
    assert_bad_input(pulse("alerts", "add", "m", "--format", "email"), "to")
    assert_bad_input(pulse("alerts", "add", "pd", "--format", "pagerduty"), "secret-env")
    with mailbox() as box:
        for key, value in {**smtp_config(box.port, "none"), EGRESS_ALLOW: "127.0.0.0/8"}.items():
            assert pulse("config", "set", key, value).exit_code == 0, key
        added = pulse("alerts", "add", "mail", "--format", "email", "--to", "ops@example.com",
                      "--to", "b@example.org", "--on", "failed")  # fmt: skip
        assert added.exit_code == 0, added.stderr
        assert "ops@example.com, b@example.org (email)" in added.stdout
        sent = pulse("alerts", "test", "mail")
        assert sent.exit_code == 0, sent.stderr
        assert sent.stdout.strip() == (
            "test event delivered to ops@example.com, b@example.org: accepted"
        )
        (mail,) = box.received()
    assert mail.recipients == ("ops@example.com", "b@example.org")
    assert "test" in mail.message["Subject"]
    with receiver(status=202) as r:
        added = pulse("alerts", "add", "pd", "--format", "pagerduty", "--webhook", r.url,
                      "--secret-env", "PD_KEY")  # fmt: skip
        assert added.exit_code == 0, added.stderr
        missing = pulse("alerts", "test", "pd")
        assert missing.exit_code == 1
        assert_one_line_error(missing.stderr, "$PD_KEY is not set on this host")
        sent = pulse("alerts", "test", "pd", PD_KEY=ROUTING_KEY)
        assert sent.exit_code == 0, sent.stderr
        assert ROUTING_KEY not in sent.stdout + sent.stderr
        (request,) = r.received()
    assert request.json()["routing_key"] == ROUTING_KEY
    assert request.json()["payload"]["severity"] == "info"
    listed = json.loads(pulse("alerts", "list", "--json").stdout)
    assert [(r["name"], r["format"], r["to"]) for r in listed] == [
        ("mail", "email", ["ops@example.com", "b@example.org"]),
        ("pd", "pagerduty", None),
    ]


async def test_a_silent_smtp_server_fails_the_attempt_within_the_timeout(
    store: JobStore, settings: ClusterSettings, open_session: Opener, alerts: AlertStore
) -> None:
    await add_rule(settings, "mail", None, format="email", to="ops@example.com")
    await fail_then_recover(store, open_session)
    with socket.socket() as silent:  # accepts connections (the backlog), never greets
        silent.bind((HOST, 0))
        silent.listen(4)
        config = smtp_config(silent.getsockname()[1], "none")

        async def values() -> Mapping[str, str]:
            return config

        deliver = AlertDelivery(alerts, "n1", Stats(), environ={}, config=values, timeout_s=0.5)
        assert await deliver.run_once() is None
    (row,) = [d for d in await alerts.deliveries("pending", 5) if d.event == "failed"]
    assert row.last_error == f"no answer from {HOST}:{config['smtp.port']} within 0.5s"
