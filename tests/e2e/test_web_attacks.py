"""Attacks on a real ``pulse web`` and real nodes, each a named test that shows it refused:
nothing written, no secret in any response, row, log or output. The list, with the threat
model, is in docs/security.md; a new attack goes in both.

Sections: handlers written over the API; secrets and egress; console sessions and sign-in;
quotas and bodies; database roles and webhooks.
"""

from __future__ import annotations

import contextlib
import secrets
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path

import httpx
import pytest

from cluster.web.tokens import csrf_token, new_token, token_hash
from tests.helpers.cli import spawn
from tests.helpers.databases import fresh_settings
from tests.helpers.web import Api, api_cluster, make_token, web_process

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def api(database_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Api]:
    with api_cluster(database_url, tmp_path_factory.mktemp("attacks")) as running:
        yield running


# --- Handlers written over the API -------------------------------------------------------


# --- Secrets and egress ------------------------------------------------------------------


# --- Console sessions and sign-in --------------------------------------------------------

COOKIE = "pulse_session"
LIMIT = {"max_concurrent": 7}


def written(api: Api) -> tuple[int, ...]:
    """What a refused request must leave as it was: jobs, audit rows, tenants' limits."""
    return tuple(
        int(api.sql(f"SELECT count(*) FROM {table}")[0][0])
        for table in ("jobs", "api_audit", "tenant_limits")
    )


def sessions_of(api: Api, token_name: str) -> int:
    found = api.sql("SELECT count(*) FROM console_sessions WHERE token_name = %s", (token_name,))
    return int(found[0][0])


def from_client(api: Api, address: str, **headers: str) -> httpx.Client:
    """A browser at ``address``, as the trusted proxy in front of ``pulse web`` reports it
    (uvicorn believes 127.0.0.1): each test's failures count against its own address."""
    return httpx.Client(
        base_url=api.web.url, headers={"X-Forwarded-For": address, **headers}, timeout=10
    )


@contextlib.contextmanager
def signed_in(api: Api, token: str, address: str) -> Iterator[tuple[httpx.Client, str, str]]:
    """A browser signed in with ``token``: the client, its session id and CSRF token."""
    with from_client(api, address) as browser:
        answer = browser.post("/console/session", json={"token": token})
        assert answer.status_code == 200, answer.text
        yield browser, browser.cookies[COOKIE], answer.json()["csrf"]


def with_cookie(api: Api, address: str, cookie: str) -> httpx.Client:
    """A client that sends ``cookie`` as the session cookie, whatever the server says."""
    return from_client(api, address, Cookie=f"{COOKIE}={cookie}")


def assert_no_secret(api: Api, answers: list[httpx.Response], *secrets_: str) -> None:
    """No secret in any answer (body or header), in the log of ``pulse web``, or in a row
    of the audit trail or the session table (which hold names and hashes only)."""
    rows = repr(api.sql("SELECT * FROM api_audit")) + repr(
        api.sql("SELECT token_name, encode(id_hash, 'escape') FROM console_sessions")
    )
    log = api.web.log()
    for secret in secrets_:
        for answer in answers:
            assert secret not in answer.text and secret not in str(answer.headers)
        assert secret not in log and secret not in rows
        assert token_hash(secret).hex() not in log


def test_a_cookie_holding_a_raw_api_token_is_refused(api: Api) -> None:
    token = api.tokens["admin"]
    before = written(api)
    with with_cookie(api, "198.51.100.11", token) as forged:
        answers = [
            forged.get("/api/jobs"),
            forged.get("/console/session"),
            forged.put(
                "/api/tenants/raw/limit", json=LIMIT, headers={"X-CSRF-Token": csrf_token(token)}
            ),
        ]
    assert [a.status_code for a in answers] == [401, 401, 401]
    assert all("max-age=0" in a.headers["set-cookie"].lower() for a in answers)
    assert written(api) == before
    assert_no_secret(api, answers, token)


def test_a_session_cookie_after_sign_out_is_refused(api: Api) -> None:
    with signed_in(api, api.tokens["read"], "198.51.100.12") as (browser, session, csrf):
        assert browser.get("/api/jobs").status_code == 200
        out = browser.delete("/console/session", headers={"X-CSRF-Token": csrf})
        assert out.status_code == 204
    assert not api.sql("SELECT 1 FROM console_sessions WHERE id_hash = %s", (token_hash(session),))
    with with_cookie(api, "198.51.100.12", session) as replayed:
        answers = [replayed.get("/api/jobs"), replayed.get("/console/session")]
    assert [a.status_code for a in answers] == [401, 401]
    assert_no_secret(api, [out, *answers], session, api.tokens["read"])


def test_a_session_after_its_tokens_revocation_is_refused(api: Api) -> None:
    doomed = make_token(api.settings, "doomed", "admin")
    with signed_in(api, doomed, "198.51.100.13") as (browser, session, csrf):
        assert browser.get("/console/session").json()["name"] == "doomed"
        assert sessions_of(api, "doomed") == 1
        revoked = spawn(api.settings, "tokens", "revoke", "doomed").result()
        assert revoked.returncode == 0, revoked.stderr
        assert sessions_of(api, "doomed") == 0, "deleted with the token"
        before = written(api)
        answers = [
            browser.get("/api/jobs"),
            with_cookie(api, "198.51.100.13", session).put(
                "/api/tenants/doomed/limit", json=LIMIT, headers={"X-CSRF-Token": csrf}
            ),
        ]
    assert [a.status_code for a in answers] == [401, 401]
    assert written(api) == before
    assert_no_secret(api, answers, session, doomed)
    assert doomed not in revoked.stdout + revoked.stderr


def test_a_session_cookie_without_csrf_on_post_is_403(api: Api) -> None:
    before = written(api)
    with signed_in(api, api.tokens["admin"], "198.51.100.14") as (browser, session, csrf):
        answers = [
            browser.put("/api/tenants/csrf/limit", json=LIMIT),
            browser.put(
                "/api/tenants/csrf/limit",
                json=LIMIT,
                headers={"X-CSRF-Token": csrf_token(api.tokens["admin"])},
            ),
            browser.delete("/console/session"),
        ]
        assert [a.status_code for a in answers] == [403, 403, 403]
        assert all("CSRF" in a.json()["message"] for a in answers)
        assert written(api) == before
        assert sessions_of(api, "ops") >= 1, "a sign-out without its CSRF token is refused too"
        done = browser.put("/api/tenants/csrf/limit", json=LIMIT, headers={"X-CSRF-Token": csrf})
        assert done.status_code == 200, "the same request with the token is let through"
        cleared = browser.delete("/api/tenants/csrf/limit", headers={"X-CSRF-Token": csrf})
        assert cleared.status_code == 204
    assert_no_secret(api, [*answers, done, cleared], session, api.tokens["admin"])


def test_bad_tokens_behind_a_proxy_do_not_lock_out_valid_tokens(api: Api) -> None:
    """Ten bad tokens a minute (the default) from one client behind the trusted proxy: its
    next failure is 429, but a valid token from the same client, other clients behind the
    same proxy, and the console's sign-in still get in."""
    attacker, neighbour, valid = "203.0.113.7", "203.0.113.8", api.tokens["read"]
    guesses = [new_token() for _ in range(11)]
    with from_client(api, attacker) as client:
        tried = [client.get("/api/jobs", headers={"Authorization": f"Bearer {g}"}) for g in guesses]
        assert [a.status_code for a in tried] == [401] * 10 + [429]
        assert int(tried[-1].headers["retry-after"]) > 0
        ok = client.get("/api/jobs", headers={"Authorization": f"Bearer {valid}"})
        assert ok.status_code == 200, "a valid token from the throttled address"
        console = client.post("/console/session", json={"token": valid})
        assert console.status_code == 200, "and its console sign-in"
        again = client.get("/api/jobs", headers={"Authorization": f"Bearer {new_token()}"})
        assert again.status_code == 429
    with from_client(api, neighbour) as client:
        assert (
            client.get("/api/jobs", headers={"Authorization": f"Bearer {valid}"}).status_code == 200
        )
        assert (
            client.get("/api/jobs", headers={"Authorization": f"Bearer {new_token()}"}).status_code
            == 401
        )
    sprayed = "pulse_SPRAY" + secrets.token_urlsafe(8)  # one guess from many addresses
    spray = []
    for i in range(11):
        with from_client(api, f"203.0.113.{100 + i}") as client:
            spray.append(client.get("/api/jobs", headers={"Authorization": f"Bearer {sprayed}"}))
    assert [a.status_code for a in spray] == [401] * 10 + [429]
    with api.web.client(valid) as direct:  # the proxy's own address was never throttled
        assert direct.get("/api/jobs").status_code == 200
    assert_no_secret(api, [*tried, ok, console, again, *spray], *guesses, sprayed, valid)


@pytest.fixture(scope="module")
def untrusting(database_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Api]:
    """A ``pulse web`` that believes forwarded headers only from 192.0.2.1, so the tests'
    own address (127.0.0.1) is an untrusted client."""
    options = ("--forwarded-allow-ips", "192.0.2.1", "--auth-failures", "3")
    with api_cluster(database_url, tmp_path_factory.mktemp("untrusting"), *options) as running:
        yield running


def test_an_untrusted_clients_forged_x_forwarded_for_is_ignored(untrusting: Api) -> None:
    api = untrusting
    guesses = [new_token() for _ in range(4)]
    answers = []
    for i, guess in enumerate(guesses):  # each claims another address: all count as ours
        with from_client(api, f"198.51.100.{50 + i}", Authorization=f"Bearer {guess}") as forged:
            answers.append(forged.get("/api/jobs"))
    assert [a.status_code for a in answers] == [401, 401, 401, 429]
    with from_client(api, "10.20.30.40", Authorization=f"Bearer {api.tokens['admin']}") as forged:
        done = forged.put("/api/tenants/forged/limit", json=LIMIT)
        assert done.status_code == 200
        assert forged.delete("/api/tenants/forged/limit").status_code == 204
    sources = {row[0] for row in api.sql("SELECT DISTINCT source FROM api_audit")}
    assert sources == {"127.0.0.1"}, "the audit trail records the real peer"
    with from_client(api, "10.20.30.40", **{"X-Forwarded-Proto": "https"}) as forged:
        signed = forged.post("/console/session", json={"token": api.tokens["read"]})
    assert signed.status_code == 200
    assert "secure" not in signed.headers["set-cookie"].lower(), "plain HTTP on loopback"
    assert "strict-transport-security" not in signed.headers
    assert_no_secret(api, [*answers, done, signed], *guesses, *api.tokens.values())


# --- Quotas and bodies -------------------------------------------------------------------

HUGE_INTEGER = (
    b'{"name": "huge", "schedule": "@every 1h", "handler": "x:y", "retries": ' + b"9" * 5000 + b"}"
)


def refused_everywhere(api: Api, body: bytes) -> list[httpx.Response]:
    """``body`` sent to every route that reads JSON: each answers one line of 422 and
    nothing is written."""
    before = written(api)
    json_type = {"Content-Type": "application/json"}
    with api.as_("admin") as admin:
        answers = [
            admin.post("/api/jobs", content=body, headers=json_type),
            admin.post("/api/jobs:apply", content=body, headers=json_type),
            admin.put("/api/tenants/bodies/limit", content=body, headers=json_type),
            admin.post("/api/jobs/default/absent/backfill", content=body, headers=json_type),
        ]
    with from_client(api, "198.51.100.99", **json_type) as browser:
        answers.append(browser.post("/console/session", content=body))
    for answer in answers:
        assert answer.status_code == 422, (answer.request.url, answer.text)
        found = answer.json()
        assert set(found) == {"error", "field", "message"} and "\n" not in found["message"]
        assert len(answer.text) < 400, "one line, not an echo of the body"
    assert written(api) == before
    assert_no_secret(api, answers, *api.tokens.values())
    return answers


def test_a_5000_digit_integer_is_422_and_writes_nothing(api: Api) -> None:
    for answer in refused_everywhere(api, HUGE_INTEGER):
        assert answer.json()["field"] == "body" and "too large" in answer.json()["message"]


def test_a_float_of_1e999_is_422_and_writes_nothing(api: Api) -> None:
    for answer in refused_everywhere(api, b'{"name": "inf", "max_concurrent": 1e999}'):
        assert "too large" in answer.json()["message"]


def test_nan_is_422_and_writes_nothing(api: Api) -> None:
    for answer in refused_everywhere(api, b'{"name": "nan", "max_concurrent": NaN}'):
        assert "NaN" in answer.json()["message"]


def test_malformed_json_is_422_and_writes_nothing(api: Api) -> None:
    for body in (b'{"name": "broken", ', b"\xff\xfe{}", b'{"a": 1, "a": 2}'):
        refused_everywhere(api, body)


def test_durations_and_times_past_what_sql_can_add_are_422(api: Api) -> None:
    """A late-after of 1e300 seconds would overflow the late pass's timestamp arithmetic for
    every job of every tenant; a backfill from year 1 the slot arithmetic. Both are bad input."""
    before = written(api)
    job = {"name": "forever", "schedule": "@every 1h", "handler": "billing.jobs:rollup"}
    with api.as_("admin") as admin:
        answers = [
            admin.post("/api/jobs", json={**job, "late_after": 1e300}),
            admin.post("/api/jobs", json={**job, "timeout": "99999999999999d"}),
            admin.post(
                "/api/jobs/default/forever/backfill",
                json={
                    "from": "0001-01-01T00:00:00+00:00",
                    "to": "2026-01-01T00:00:00+00:00",
                },
            ),
            admin.post(
                "/api/jobs/default/forever/backfill",
                json={
                    "from": "2026-01-01T00:00:00+00:00",
                    "to": "2026-01-02T00:00:00+00:00",
                    "max_parallel": 10**30,
                },
            ),
        ]
    assert [(a.status_code, a.json()["field"]) for a in answers] == [
        (422, "late_after"), (422, "timeout"), (422, "from"), (422, "max_parallel"),
    ]  # fmt: skip
    assert written(api) == before


def test_postgres_down_is_503_naming_no_host_or_user(database_url: str, tmp_path: Path) -> None:
    """``pulse web`` started against a closed port: /api/health answers without a token,
    and what needs the store says only that it is unavailable."""
    port = 1  # privileged and unused: nothing can listen there, not even the web itself
    user, password, database = (
        "pulse_hidden_user",
        "hunter2-" + secrets.token_hex(4),
        "pulse_hidden_db",
    )
    url = f"postgresql://{user}:{password}@127.0.0.1:{port}/{database}"
    settings = replace(fresh_settings(database_url), database_url=url)
    token = new_token()
    with web_process(settings, tmp_path) as web:
        health = httpx.get(f"{web.url}/api/health")
        bearer = {"Authorization": f"Bearer {token}"}
        with (
            httpx.Client(base_url=web.url, timeout=60) as client,  # the pool waits 5 s
            ThreadPoolExecutor(3) as pool,  # so the three wait together
        ):
            answers = list(
                pool.map(
                    lambda ask: ask(),
                    [
                        lambda: client.get("/api/status", headers=bearer),
                        lambda: client.get("/api/jobs", headers=bearer),
                        lambda: client.post("/console/session", json={"token": token}),
                    ],
                )
            )
        log = web.log()
    assert health.status_code == 200
    assert [a.status_code for a in answers] == [503, 503, 503]
    for answer in answers:
        assert answer.json()["message"] == "the store is unavailable; try again later"
        clues = (user, password, database, f":{port}/", f"port {port}", "127.0.0.1", "postgres")
        for clue in (*clues, token):
            assert clue not in answer.text and clue not in str(answer.headers)
    assert password not in log and token not in log


# --- Database roles and webhooks ---------------------------------------------------------
