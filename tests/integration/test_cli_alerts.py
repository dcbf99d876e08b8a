"""``pulse alerts``: rules added, listed and removed, a test event sent to a real receiver,
the deliveries listed; bad input is one line naming the field, exit 2, nothing written;
webhook URLs are shown redacted everywhere."""

from __future__ import annotations

import functools
import json
from typing import Any

import psycopg
import pytest

from cluster.alerts.rules import SIGNATURE_HEADER
from cluster.settings import ClusterSettings
from tests.helpers.cli import add_args, assert_bad_input, assert_one_line_error, invoke
from tests.helpers.receiver import receiver

pytestmark = pytest.mark.timeout(60)
TOKEN_URL = "https://hooks.example.com/services/T000/B000/XXXXSECRET?token=abc123"
RULE_KEYS = {"name", "webhook", "to", "events", "format", "secret_env", "tenant", "job"}
RULE_KEYS |= {"legacy_signature"}
DELIVERY_KEYS = {
    "id", "rule", "event_id", "event", "tenant", "job", "slot", "status", "attempts",
    "next_attempt_at", "locked_by", "last_error", "delivered_at", "created_at",
}  # fmt: skip


@pytest.fixture
def pulse(settings: ClusterSettings) -> Any:
    pulse = functools.partial(invoke, settings)
    assert pulse("init", "--shards", "16").exit_code == 0
    assert pulse("config", "set", "egress.allow", "127.0.0.0/8").exit_code == 0
    assert pulse(*add_args("rollup", "--tenant", "acme")).exit_code == 0
    return pulse


def rules(settings: ClusterSettings) -> list[tuple[Any, ...]]:
    with psycopg.connect(settings.database_url, autocommit=True) as conn:
        return conn.execute(f"SELECT * FROM {settings.schema}.alert_rules ORDER BY name").fetchall()


def test_rules_are_added_listed_and_removed_with_their_webhook_redacted(
    pulse: Any, settings: ClusterSettings
) -> None:
    added = pulse(
        "alerts", "add", "ops", "--webhook", TOKEN_URL, "--on", "failed,lost",
        "--tenant", "acme", "--secret-env", "OPS_SECRET",
    )  # fmt: skip
    assert added.exit_code == 0, added.stderr
    assert "XXXXSECRET" not in added.stdout and "abc123" not in added.stdout
    assert "https://hooks.example.com/services/..." in added.stdout
    assert pulse("alerts", "add", "chat", "--webhook", "http://chat.local/x", "--format", "slack",
                 "--job", "rollup").exit_code == 0  # fmt: skip

    listed = pulse("alerts", "list")
    assert listed.exit_code == 0
    assert "XXXXSECRET" not in listed.stdout and "abc123" not in listed.stdout
    lines = listed.stdout.splitlines()
    assert lines[0].split() == ["NAME", "EVENTS", "SCOPE", "FORMAT", "SIGNED", "WITH", "WEBHOOK"]
    assert lines[2].split()[:3] == ["ops", "failed,lost", "tenant"]

    as_json = json.loads(pulse("alerts", "list", "--json").stdout)
    assert [r["name"] for r in as_json] == ["chat", "ops"]
    assert all(set(r) == RULE_KEYS for r in as_json)
    ops = as_json[1]
    assert ops == {
        "name": "ops",
        "webhook": "https://hooks.example.com/services/...",
        "to": None,
        "events": ["failed", "lost"],
        "format": "json",
        "secret_env": "OPS_SECRET",
        "tenant": "acme",
        "job": None,
        "legacy_signature": False,
    }
    assert as_json[0]["events"] == [
        "failed", "recovered", "lost", "late", "skipped", "paused",
        "slow", "overdue", "too_fast", "assertion_failed", "double_run", "incomplete",
    ]  # fmt: skip

    assert pulse("alerts", "remove", "ops").exit_code == 0
    gone = pulse("alerts", "remove", "ops")
    assert gone.exit_code == 1
    assert_one_line_error(gone.stderr, "no alert rule named 'ops'")
    assert [r[0] for r in rules(settings)] == ["chat"]


@pytest.mark.parametrize(
    ("args", "field"),
    [
        (["--webhook", "ftp://example.com/x"], "webhook"),
        (["--webhook", "not a url"], "webhook"),
        (["--webhook", "http://x/", "--on", "failed,exploded"], "on"),
        (["--webhook", "http://x/", "--format", "xml"], "format"),
        (["--webhook", "http://x/", "--job", "nope"], "job"),
        (["--webhook", "http://x/", "--job", "rollup", "--tenant", "default"], "tenant"),
        (["--webhook", "http://x/", "--tenant", "nobody"], "tenant"),
        (["--webhook", "http://x/", "--secret-env", "NOT-A-NAME"], "secret-env"),
        (["--webhook", "http://x/", "--name-is-taken"], "name"),
    ],
)
def test_bad_input_writes_nothing(
    pulse: Any, settings: ClusterSettings, args: list[str], field: str
) -> None:
    assert pulse("alerts", "add", "taken", "--webhook", "http://x/").exit_code == 0
    before = rules(settings)
    name = "taken" if "--name-is-taken" in args else "new"
    args = [a for a in args if a != "--name-is-taken"]
    assert_bad_input(pulse("alerts", "add", name, *args), field)
    assert rules(settings) == before


def test_a_test_event_reaches_the_receiver_signed(pulse: Any) -> None:
    with receiver() as r:
        assert pulse("alerts", "add", "ops", "--webhook", r.url, "--secret-env", "OPS_SECRET",
                     "--format", "slack").exit_code == 0  # fmt: skip
        sent = pulse("alerts", "test", "ops", OPS_SECRET="k3y")
        assert sent.exit_code == 0, sent.stderr
        assert "HTTP 200" in sent.stdout and "signed with $OPS_SECRET" in sent.stdout
        (request,) = r.received()
        assert request.signed_with("k3y") and SIGNATURE_HEADER not in request.headers
        assert "test" in request.json()["text"]

        unsigned = pulse("alerts", "test", "ops")  # the variable is not set here
        assert unsigned.exit_code == 1
        assert_one_line_error(unsigned.stderr, "$OPS_SECRET is not set on this host")
        assert len(r.received()) == 1


def test_a_test_event_the_receiver_refuses_exits_1(pulse: Any) -> None:
    with receiver(status=500) as r:
        url = r.url + "/pr1vate?token=s3cret"
        assert pulse("alerts", "add", "ops", "--webhook", url).exit_code == 0
        sent = pulse("alerts", "test", "ops")
        assert len(r.received()) == 1
    assert sent.exit_code == 1
    assert_one_line_error(sent.stderr, "HTTP 500")
    assert "s3cret" not in sent.stderr and "pr1vate" not in sent.stderr
    r.stop()
    down = pulse("alerts", "test", "ops")
    assert down.exit_code == 1
    assert_one_line_error(down.stderr, "not delivered")
    assert "s3cret" not in down.stderr


def test_deliveries_are_listed_newest_first(pulse: Any, settings: ClusterSettings) -> None:
    assert pulse("alerts", "add", "ops", "--webhook", TOKEN_URL).exit_code == 0
    with psycopg.connect(settings.database_url, autocommit=True) as conn:
        conn.execute(f"SET search_path TO {settings.schema}")
        for job in ("one", "two"):
            conn.execute(
                "SELECT raise_alert('failed', gen_random_uuid(), 'acme', %s, now(), 1, 'n1',"
                " 'a', 'boom', NULL)",
                (job,),
            )
    listed = pulse("alerts", "deliveries")
    assert listed.exit_code == 0
    rows = listed.stdout.splitlines()
    assert rows[0].split()[:4] == ["ID", "RULE", "EVENT", "TENANT"]
    assert [r.split()[4] for r in rows[1:]] == ["two", "one"]
    as_json = json.loads(pulse("alerts", "deliveries", "--status", "pending", "--json").stdout)
    assert [d["job"] for d in as_json] == ["two", "one"]
    assert all(set(d) == DELIVERY_KEYS and d["status"] == "pending" for d in as_json)
    assert "XXXXSECRET" not in listed.stdout
    assert json.loads(pulse("alerts", "deliveries", "--status", "failed", "--json").stdout) == []
    assert_bad_input(pulse("alerts", "deliveries", "--status", "lost"), "status")
