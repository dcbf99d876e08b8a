"""``pulse tokens``, ``pulse config set api.handlers`` and ``pulse web``'s options: tokens
printed once and stored only as a hash, expiring in 90 days unless told, listed without
secrets, revoked at once; bad input is one line, exit 2."""

from __future__ import annotations

import json

import psycopg

from cluster.settings import ClusterSettings
from cluster.web.tokens import token_hash
from tests.helpers.cli import Invoke


def stored(settings: ClusterSettings) -> list[tuple[str, bytes]]:
    with psycopg.connect(settings.database_url) as conn:
        rows = conn.execute(f"SELECT name, hash FROM {settings.schema}.api_tokens").fetchall()
    return [(name, bytes(digest)) for name, digest in rows]


def test_a_token_is_printed_once_and_stored_as_a_hash(
    pulse: Invoke, settings: ClusterSettings
) -> None:
    assert pulse("init").exit_code == 0
    made = pulse("tokens", "create", "ci", "--role", "write", "--tenant", "acme", "--expires", "1d")
    assert made.exit_code == 0, made.output
    secret = made.stdout.strip()
    assert secret.startswith("pulse_") and len(secret) > 40
    assert stored(settings) == [("ci", token_hash(secret))]

    listed = pulse("tokens", "list", "--json")
    [entry] = json.loads(listed.stdout)
    assert entry["name"] == "ci" and entry["role"] == "write" and entry["tenant"] == "acme"
    assert entry["expires_at"] is not None
    assert secret not in listed.output and secret not in pulse("tokens", "list").output

    again = pulse("tokens", "create", "ci", "--role", "read")
    assert again.exit_code == 2 and len(again.stderr.splitlines()) == 1
    assert pulse("tokens", "revoke", "ci").exit_code == 0
    missing = pulse("tokens", "revoke", "ci")
    assert missing.exit_code == 1 and "no live token named" in missing.stderr


def test_a_revoked_token_keeps_its_row_and_its_name_is_never_reused(
    pulse: Invoke, settings: ClusterSettings
) -> None:
    assert pulse("init").exit_code == 0
    first = pulse("tokens", "create", "ci", "--role", "read").stdout.strip()
    assert pulse("tokens", "revoke", "ci").exit_code == 0
    assert stored(settings) == [("ci", token_hash(first))], "the audit trail keeps its token"
    [entry] = json.loads(pulse("tokens", "list", "--json").stdout)
    assert entry["revoked_at"] is not None and entry["expires_at"] <= entry["revoked_at"]
    again = pulse("tokens", "create", "ci", "--role", "admin")
    assert again.exit_code == 2 and "not reused" in again.stderr
    assert stored(settings) == [("ci", token_hash(first))]


def test_bad_token_input_is_one_line_and_writes_nothing(
    pulse: Invoke, settings: ClusterSettings
) -> None:
    assert pulse("init").exit_code == 0
    for args in (
        ("tokens", "create", "x", "--role", "root"),
        ("tokens", "create", "x", "--role", "read", "--expires", "soon"),
        ("tokens", "create", "x", "--role", "read", "--expires", "0s"),
        ("tokens", "create", "", "--role", "read"),
        ("tokens", "create", "x", "--role", "read", "--tenant", ""),
    ):
        result = pulse(*args)
        assert result.exit_code == 2, (args, result.output)
        assert len(result.stderr.strip().splitlines()) == 1
    assert stored(settings) == []


def test_the_handler_allow_list_is_a_config_key(pulse: Invoke) -> None:
    assert pulse("init").exit_code == 0
    shown = json.loads(pulse("config", "show", "--json").stdout)
    assert shown["api.handlers"] == ""
    done = pulse("config", "set", "api.handlers", " billing.jobs:rollup, shell:backup * ")
    assert done.exit_code == 0
    assert done.stdout.strip() == "api.handlers = billing.jobs:rollup,shell:backup *"
    for bad_value in ("billing", "billing.*:*", "*:*", "http:* https://hooks.example.com*"):
        bad = pulse("config", "set", "api.handlers", bad_value)
        assert bad.exit_code == 2 and "api.handlers" in bad.stderr, bad_value
        assert len(bad.stderr.strip().splitlines()) == 1
    shown = json.loads(pulse("config", "show", "--json").stdout)
    assert shown["api.handlers"] == "billing.jobs:rollup,shell:backup *"
    assert pulse("config", "set", "api.handlers", "").exit_code == 0
    assert pulse("config", "set", "api.env", "BILLING_*, REPORTS_TOKEN").exit_code == 0
    assert json.loads(pulse("config", "show", "--json").stdout)["api.env"] == (
        "BILLING_*,REPORTS_TOKEN"
    )
    assert pulse("config", "set", "api.env", "A B").exit_code == 2


def test_a_token_expires_after_90_days_unless_told_and_never_warns(
    pulse: Invoke, settings: ClusterSettings
) -> None:
    assert pulse("init").exit_code == 0
    assert pulse("tokens", "create", "default", "--role", "read").exit_code == 0
    dated = pulse("tokens", "create", "dated", "--role", "read", "--expires", "2099-01-01")
    assert dated.exit_code == 0, dated.output
    forever = pulse("tokens", "create", "forever", "--role", "read", "--expires", "never")
    assert forever.exit_code == 0
    assert "warning" in forever.stderr and "never expires" in forever.stderr
    assert forever.stdout.strip().startswith("pulse_"), "the token alone on stdout"
    with psycopg.connect(settings.database_url) as conn:
        rows = conn.execute(
            "SELECT name, round(extract(epoch FROM expires_at - created_at) / 86400)"
            f" FROM {settings.schema}.api_tokens WHERE name = 'default'"
        ).fetchall()
    assert rows == [("default", 90)]
    listed = {
        t["name"]: t["expires_at"] for t in json.loads(pulse("tokens", "list", "--json").stdout)
    }
    assert listed["dated"].startswith("2099-01-01T00:00:00") and listed["forever"] is None
    table = pulse("tokens", "list").stdout
    assert "EXPIRES" in table and "never" in table and "2099-01-01" in table


def test_bad_pulse_web_options_are_one_line_and_exit_2(pulse: Invoke) -> None:
    for args in (
        ("--forwarded-allow-ips", "proxy.example.com"),
        ("--forwarded-allow-ips", "10.0.0.0/33"),
        ("--session-idle", "0s"),
        ("--session-max", "400d"),
        ("--session-max", "soon"),
    ):
        result = pulse("web", "--bind", "127.0.0.1:1", *args)
        assert result.exit_code == 2, (args, result.output)
        assert len(result.stderr.strip().splitlines()) == 1
