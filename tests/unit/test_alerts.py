"""Alert rules: validation, scope, bodies and signatures (pure)."""

from __future__ import annotations

import base64
import json
from datetime import UTC, datetime

import pytest

from cluster.alerts.rules import (
    EVENTS,
    AlertEvent,
    AlertRule,
    body,
    parse_events,
    redact_url,
    signature,
    signing_key,
    standard_signature,
    verify,
)
from cluster.alerts.webhook import headers
from cluster.errors import InvalidInput

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


def event(**changes: object) -> AlertEvent:
    values: dict[str, object] = {
        "id": "7f1c",
        "event": "failed",
        "tenant": "acme",
        "job": "rollup",
        "slot": T0,
        "attempt": 3,
        "node": "a-1",
        "zone": "a",
        "error": "RuntimeError: boom\nTraceback ...",
        "detail": None,
        "created_at": T0,
    }
    values.update(changes)
    return AlertEvent(**values)  # type: ignore[arg-type]


def test_rule_defaults_to_every_event_for_the_whole_cluster() -> None:
    rule = AlertRule.build("ops", "https://hooks.example/x")
    assert rule.events == EVENTS
    assert rule.wants("lost", "any-tenant", "any-job")


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"url": "ftp://x/y"}, "webhook"),
        ({"url": "file:///etc/passwd"}, "webhook"),
        ({"url": "http://"}, "webhook"),
        ({"events": "failed,exploded"}, "on"),
        ({"events": " , "}, "on"),
        ({"format": "xml"}, "format"),
        ({"secret_env": "NOT-A-NAME"}, "secret-env"),
        ({"name": ""}, "name"),
    ],
)
def test_bad_rules_name_the_field(kwargs: dict[str, str], field: str) -> None:
    args = {"name": "ops", "url": "https://hooks.example/x"} | kwargs
    with pytest.raises(InvalidInput) as err:
        AlertRule.build(args.pop("name"), args.pop("url"), **args)  # type: ignore[arg-type]
    assert err.value.field == field


def test_scope_by_tenant_job_and_event() -> None:
    rule = AlertRule.build("r", "http://h/", events="failed,lost", tenant="acme", job="rollup")
    assert rule.events == ("failed", "lost")
    assert rule.wants("failed", "acme", "rollup")
    assert not rule.wants("late", "acme", "rollup")
    assert not rule.wants("failed", "other", "rollup")
    assert not rule.wants("failed", "acme", "other")


def test_events_come_back_in_a_stable_order_without_repeats() -> None:
    assert parse_events(["lost", "failed", "lost"]) == ("failed", "lost")


def test_webhook_urls_are_shown_without_their_secrets() -> None:
    assert redact_url("https://hooks.slack.com/services/T0/B0/secret") == (
        "https://hooks.slack.com/services/..."
    )
    assert (
        redact_url("https://user:pw@h.example:8443/hook?token=s")
        == "https://h.example:8443/hook/..."
    )
    assert redact_url("http://h/") == "http://h/"
    shown = AlertRule.build("r", "https://h/a/b?token=s").to_json()["webhook"]
    assert "token" not in shown and "b" not in shown.split("/")[-1]


def test_json_body_carries_the_fields_and_a_link_free_summary() -> None:
    data = json.loads(body(event(), "json"))
    assert data["event"] == "failed" and data["job"] == "rollup" and data["tenant"] == "acme"
    assert data["slot"] == T0.isoformat() and data["attempt"] == 3
    assert data["node"] == "a-1" and data["zone"] == "a" and data["id"] == "7f1c"
    assert data["summary"].startswith("Pulse: job rollup (tenant acme)")
    assert "RuntimeError: boom" in data["summary"] and "Traceback" not in data["summary"]
    assert "http" not in data["summary"]


def test_slack_body_is_the_incoming_webhook_shape() -> None:
    data = json.loads(body(event(event="lost", detail="lost with its node"), "slack"))
    assert set(data) == {"text"}
    assert "lost with its node" in data["text"]


def test_signature_is_the_hex_hmac_of_the_body() -> None:
    payload = body(event(), "json")
    header = signature(payload, "s3cret")
    assert header.startswith("sha256=") and len(header) == len("sha256=") + 64
    assert verify(payload, "s3cret", header)
    assert not verify(payload + b" ", "s3cret", header)
    assert not verify(payload, "other", header)


def test_standard_webhooks_signature_matches_the_reference_vector() -> None:
    # The test vector of https://github.com/standard-webhooks/standard-webhooks.
    secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
    found = standard_signature(
        b'{"test": 2432232314}', secret, "msg_p5jXN8AQM9LWM0D4loKWxJek", 1614265330
    )
    assert found == "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="


def test_a_plain_secret_signs_with_its_bytes_and_a_bad_whsec_secret_is_named_not_shown() -> None:
    assert signing_key("s3cret") == b"s3cret"
    assert signing_key("whsec_" + base64.b64encode(b"key").decode()) == b"key"
    with pytest.raises(ValueError) as caught:
        signing_key("whsec_not*base64!")
    assert "not*base64" not in str(caught.value)


def test_webhook_headers_carry_id_time_and_the_body_only_signature_on_request() -> None:
    payload = body(event(), "json")
    found = headers(payload, "evt-1", "s3cret", timestamp=1_700_000_000)
    assert found["webhook-id"] == found["Idempotency-Key"] == "evt-1"
    assert found["webhook-timestamp"] == "1700000000"
    assert found["webhook-signature"] == standard_signature(
        payload, "s3cret", "evt-1", 1_700_000_000
    )
    assert "X-Pulse-Signature" not in found, "replayable: sent only for rules that ask"
    legacy = headers(payload, "evt-1", "s3cret", timestamp=1_700_000_000, legacy=True)
    assert verify(payload, "s3cret", legacy["X-Pulse-Signature"])
    with pytest.raises(InvalidInput, match=r"^legacy-signature:"):
        AlertRule.build("r", "https://h/x", legacy_signature=True)
    rule = AlertRule.build("r", "https://h/x", secret_env="S", legacy_signature=True)
    assert rule.to_json()["legacy_signature"] is True
    unsigned = headers(payload, "evt-1", None)
    assert "webhook-signature" not in unsigned and "X-Pulse-Signature" not in unsigned
