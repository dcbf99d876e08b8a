"""Attacks on a real ``pulse web`` and real nodes, each a named test that shows it refused:
nothing written, no secret in any response, row, log or output. The list, with the threat
model, is in docs/security.md; a new attack goes in both.

Sections: handlers written over the API; secrets and egress; console sessions and sign-in;
quotas and bodies; database roles and webhooks; calendars.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import os
import secrets
import time
import types
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from datetime import timedelta
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest

from cluster.alerts.rules import AlertRule
from cluster.errors import InvalidInput
from cluster.jobs.spec import JobSpec
from cluster.store.housekeeping.alerts import AlertStore
from cluster.store.jobstore.store import JobStore
from cluster.web.tokens import csrf_token, new_token, token_hash
from tests.helpers.cli import invoke, spawn
from tests.helpers.databases import fresh_settings
from tests.helpers.egress import (
    METADATA,
    config_as,
    docs_receiver,
    ended_run,
    loopback_name,
    metadata_address,
    serve_docs_receiver,
    stored_text,
)
from tests.helpers.nodes import Nodes
from tests.helpers.receiver import Route, receiver
from tests.helpers.roles import Logins, grant_roles
from tests.helpers.roles import refused as role_refused
from tests.helpers.tenancy import (
    HANDLER,
    allowing,
    count,
    job,
    row_locked,
    set_quota,
    tenant_token,
    waiting_on_locks,
)
from tests.helpers.tenancy import assert_no_secret as no_token_in
from tests.helpers.waiting import until
from tests.helpers.web import Api, api_cluster, cookie_attributes, make_token, web_process

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def api(database_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Api]:
    with api_cluster(database_url, tmp_path_factory.mktemp("attacks")) as running:
        yield running


# --- Handlers written over the API -------------------------------------------------------

OFFERS = "tests.registries.offers"  # a Registry of globex and one of acme offer a handler
SHOWN = "HANDLERS_DEMO_TOKEN"  # set on the node, named by the job: the job sees it
HIDDEN = "HANDLERS_DEMO_HIDDEN"  # set on the node, named by nobody: the job never sees it


@contextlib.contextmanager
def allowed(api: Api, handlers: str = "", env: str = "") -> Iterator[None]:
    """The API's allow-lists for one test, emptied afterwards (the web is shared)."""
    api.set_config("api.handlers", handlers)
    api.set_config("api.env", env)
    try:
        yield
    finally:
        api.set_config("api.handlers", "")
        api.set_config("api.env", "")


def api_secrets(api: Api) -> list[str]:
    return [api.settings.database_url, api.settings.redis_url, *api.tokens.values()]


def refused(api: Api, who: str, handler: Any, status: int, **extra: Any) -> httpx.Response:
    """POST a job with ``handler``; assert it answered ``status`` naming a handler field,
    wrote nothing, and no secret is in the answer or the web's log."""
    before = written(api)
    with api.as_(who) as client:
        answer = client.post(
            "/api/jobs", json={"name": "attack", "schedule": "@hourly", "handler": handler, **extra}
        )
    assert answer.status_code == status, answer.text
    assert answer.json()["field"].startswith("handler"), answer.text
    assert written(api) == before, "nothing written"
    for secret in api_secrets(api):
        assert secret not in answer.text and secret not in api.web.log()
    return answer


@pytest.fixture(scope="module")
def offering_node(api: Api, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Nodes]:
    """One node that loads the registries of OFFERS, with SHOWN and HIDDEN in its env."""
    nodes = Nodes(api.settings, tmp_path_factory.mktemp("offers"))
    try:
        with pytest.MonkeyPatch.context() as env:
            env.setenv(SHOWN, "shown-to-the-job")
            env.setenv(HIDDEN, "never-shown")
            nodes.start("h1", "a", "--sync-jobs", OFFERS)
        yield nodes
    finally:
        nodes.close()


@pytest.mark.parametrize(
    "command",
    [
        "/opt/backup/run x; env",
        "/opt/backup/run $(env)",
        "/opt/backup/run `env`",
        "/opt/backup/run x\nenv",
        "/opt/backup/run x && env",
        "/opt/backup/run x > /tmp/pwned",
    ],
    ids=["semicolon", "substitution", "backticks", "newline", "and", "redirection"],
)
def test_shell_injection_under_a_recommended_pattern_is_refused(api: Api, command: str) -> None:
    with allowed(api, "shell:/opt/backup/run *"):
        answer = refused(api, "acme", f"shell:{command}", 422)
    assert "shell syntax" in answer.text or "control characters" in answer.text


def test_a_shell_argv_no_pattern_token_covers_is_refused(api: Api) -> None:
    with allowed(api, "shell:/opt/backup/run *"):
        refused(api, "acme", "shell:/opt/backup/run nightly --then-delete-everything", 403)
        refused(api, "acme", "shell:/opt/backup/run", 403)
        refused(api, "acme", "shell:/opt/backup/runner nightly", 403)
        refused(api, "acme", {"shell": {"argv": ["/bin/sh", "-c", "env"]}}, 403)


@pytest.mark.parametrize(
    ("entry", "handler", "status"),
    [
        ("/usr/bin/find /data -maxdepth 1 **",
         "shell:/usr/bin/find /data -maxdepth 1 -fprintf /tmp/pwned %p", 403),
        ("/bin/cat /data/backups/*", "shell:/bin/cat /data/backups/../admin-token", 403),
        ("/opt/backup/run *", "shell:/opt/backup/run --config=/tmp/evil.conf", 403),
        ("/opt/backup/run *", {"shell": {"argv": ["/opt/backup/run", ""]}}, 422),
        ("/opt/backup/run *", {"shell": {"argv": ["/opt/backup/run", "two words"]}}, 422),
    ],
    ids=["find-fprintf", "dot-dot", "config-option", "empty-argument", "token-with-spaces"],
)  # fmt: skip
def test_argv_globs_never_pass_options_dot_segments_or_empty_arguments(
    api: Api, entry: str, handler: Any, status: int
) -> None:
    """A glob stands for a value: never an option (unless written as one), never a path
    out of its folder, never an empty or blank argument; an API argv token is one word."""
    with allowed(api, f"shell:{entry}"):
        refused(api, "write", handler, status)


def test_wildcards_never_allow_python_callables(api: Api) -> None:
    with pytest.raises(InvalidInput):
        api.set_config("api.handlers", "*:*")
    # A value stored by an older release allows nothing, and the web says so once.
    with allowed(api):
        api.sql("UPDATE config SET value = '*:*' WHERE key = 'api.handlers'")
        refused(api, "write", "sys:addaudithook", 403)
        refused(api, "write", "os:system", 403, payload={"command": "env"})
        until(lambda: "ignoring api.handlers entry '*:*'" in api.web.log(), "the warning", 10)
        assert api.web.log().count("ignoring api.handlers entry '*:*'") == 1


def test_a_handler_registered_for_another_tenant_is_refused(api: Api, offering_node: Nodes) -> None:
    theirs, mine = f"{OFFERS}:globex_report", f"{OFFERS}:acme_report"
    until(lambda: api.sql("SELECT count(*) FROM registered_handlers")[0][0] == 2, "offers", 10)
    with allowed(api):
        refused(api, "acme", theirs, 403)
        with api.as_("acme") as acme:
            made = acme.post(
                "/api/jobs", json={"name": "mine", "schedule": "@hourly", "handler": mine}
            )
            assert made.status_code == 201, made.text
            assert acme.delete("/api/jobs/acme/mine").status_code == 204


def test_pulse_variables_are_refused_in_headers_and_shell_env(api: Api) -> None:
    header = {
        "http": {
            "url": "https://hooks.example.com/",
            "headers": {"Authorization": "${env:PULSE_DATABASE_URL}"},
        }
    }
    with allowed(api, "http:https://hooks.example.com/,shell:/usr/bin/env", env="*"):
        answer = refused(api, "acme", header, 403)
        assert "PULSE_DATABASE_URL" in answer.json()["message"]
        shell = {"shell": {"argv": ["/usr/bin/env"], "env": ["PULSE_DATABASE_URL"]}}
        assert "PULSE_DATABASE_URL" in refused(api, "acme", shell, 422).json()["message"]
        broker = {"celery": {"task": "t.x", "broker": "${env:PULSE_REDIS_URL}"}}
        refused(api, "acme", broker, 403)
    with allowed(api, "http:https://hooks.example.com/", env="BILLING_*"):
        other = header["http"] | {"headers": {"Authorization": "${env:AWS_SECRET_ACCESS_KEY}"}}
        refused(api, "acme", {"http": other}, 403)


def test_a_lookalike_host_is_refused(api: Api) -> None:
    with allowed(api, "http:https://hooks.example.com/"):
        refused(api, "acme", "http:POST https://hooks.example.com.evil.io/", 403)
        refused(api, "acme", "http:POST https://hooks.example.com:8443/", 403)
        refused(api, "acme", "http:POST http://hooks.example.com/", 403)


def test_userinfo_and_dot_segments_in_a_url_are_refused(api: Api) -> None:
    with allowed(api, "http:POST https://hooks.example.com/billing/"):
        refused(api, "acme", "http:POST https://hooks.example.com@evil.io/billing/", 422)
        refused(api, "acme", "http:POST https://hooks.example.com:443@evil.io/billing/", 422)
        refused(api, "acme", "http:POST https://hooks.example.com/billing/../admin", 422)


@pytest.mark.parametrize(
    "header", ["Host", "X-Forwarded-For", "Forwarded", "X-Real-IP", "Transfer-Encoding"]
)
def test_a_job_cannot_choose_its_host_or_forwarding_headers(api: Api, header: str) -> None:
    """The allow-list names an address; a shared ingress routes by Host, and proxies trust
    X-Forwarded-*: a job could reach another virtual host or pass as another client."""
    handler = {
        "http": {"url": "https://hooks.example.com/x", "headers": {header: "admin.internal"}}
    }
    with allowed(api, "http:POST https://hooks.example.com/"):
        answer = refused(api, "write", handler, 422)
    assert header in answer.json()["message"] and "\n" not in answer.json()["message"]


def test_an_allowed_shell_job_runs_without_the_nodes_secrets(
    api: Api, offering_node: Nodes
) -> None:
    job = {"name": "printenv", "schedule": "@yearly", "handler": "shell:/usr/bin/env",
           "tenant": "acme"}  # fmt: skip
    with allowed(api, "shell:/usr/bin/env", env="HANDLERS_DEMO_*"), api.as_("acme") as acme:
        job["handler"] = {"shell": {"command": "/usr/bin/env", "env": [SHOWN]}}
        made = acme.post("/api/jobs", json=job)
        assert made.status_code == 201, made.text
        assert made.json()["handler"] == f'shell:{{"argv":["/usr/bin/env"],"env":["{SHOWN}"]}}'
        assert acme.post("/api/jobs/acme/printenv/trigger").status_code == 200

        def ran() -> Any:
            run = acme.get("/api/jobs/acme/printenv/run")
            return run.status_code == 200 and run.json()["status"] == "succeeded" and run.json()

        run = until(ran, "the triggered run to succeed", 30)
    stdout = run["output"]["stdout"]
    assert f"{SHOWN}=shown-to-the-job" in stdout and "PULSE_JOB_NAME=printenv" in stdout
    for absent in ("PULSE_DATABASE_URL", "PULSE_REDIS_URL", HIDDEN, *api_secrets(api)):
        assert absent not in stdout
    assert all(s not in offering_node.logs() for s in api.tokens.values())


# --- Secrets and egress ------------------------------------------------------------------

# The node of this section: the cluster opens 127.0.0.2 (a stand-in for a remote host) and
# all of link-local, which still leaves the metadata address shut.
EGRESS_ALLOW = "127.0.0.2/32,169.254.0.0/16"
HOOK_SECRET_ENV = "EGRESS_ATTACK_HOOK_SECRET"
HOOK_SECRET = "whsec_" + base64.b64encode(b"attack-suite-signing-key-0123456").decode()
CREDENTIALS = b'{"AccessKeyId": "ASIA-METADATA-SECRET", "Token": "metadata-token-secret"}'


@pytest.fixture(scope="module")
def egress_node(api: Api, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Nodes]:
    """One node serving the module's cluster, started once egress.allow is set (so its first
    read of the config sees it), with the webhook secret in its environment."""
    api.set_config("egress.allow", EGRESS_ALLOW)
    nodes = Nodes(api.settings, tmp_path_factory.mktemp("egress-node"))
    os.environ[HOOK_SECRET_ENV] = HOOK_SECRET
    try:
        nodes.start("egress-1")
    finally:
        del os.environ[HOOK_SECRET_ENV]
    try:
        yield nodes
    finally:
        nodes.close()


def http_entry(url: str) -> str:
    """The ``api.handlers`` entry that lets the API write GETs to ``url``'s origin."""
    parts = urlsplit(url)
    return f"http:GET {parts.scheme}://{parts.netloc}/"


def run_over_api(api: Api, name: str, handler: dict[str, Any]) -> dict[str, Any]:
    """Create ``name`` through the API (a write token, its URL allowed), trigger it, wait
    for its run: what the egress guard refuses is an address the allow-list let through."""
    entry = http_entry(handler["http"]["url"])
    with config_as(api, api_handlers=entry), api.as_("write") as client:
        created = client.post(
            "/api/jobs", json={"name": name, "schedule": "@daily", "handler": handler}
        )
        assert created.status_code == 201, created.text
        assert client.post(f"/api/jobs/default/{name}/trigger").status_code == 200
    return ended_run(api, name, f"{name}'s run to end")


def assert_nowhere(api: Api, nodes: Nodes, *secrets: str) -> None:
    """No secret in the rows, the node's log or what the API shows of runs."""
    stored = stored_text(api)
    with api.as_("read") as client:
        shown = client.get("/api/runs").text
    for secret in secrets:
        assert secret not in stored and secret not in nodes.logs() and secret not in shown


def test_the_metadata_address_is_refused_even_with_link_local_allowed(
    api: Api, egress_node: Nodes
) -> None:
    route = "/latest/meta-data/iam/security-credentials/pulse"
    with (
        metadata_address() as address,
        receiver(host=address, routes={route: Route(200, body=CREDENTIALS)}) as metadata,
    ):
        url = f"http://{address}:{metadata.port}{route}"
        run = run_over_api(api, "steal-metadata", {"http": {"method": "GET", "url": url}})
        assert metadata.received() == []
    # Without the alias (not root), 127.0.0.1 stands in, refused by the loopback rule.
    rule = "metadata" if address == METADATA else "loopback"
    assert run["status"] == "failed"
    assert f"egress to {address} refused: {rule} address" in run["last_error"]
    assert "\n" not in run["last_error"]
    assert_nowhere(api, egress_node, "ASIA-METADATA-SECRET", "metadata-token-secret")


@pytest.mark.parametrize(
    "host",
    ["localhost", "2130706433", "0x7f.1", "0x7f000001", "[::ffff:127.0.0.1]",
     "[::ffff:0:7f00:1]", "[64:ff9b:1:7f00:0:100::]"],
)  # fmt: skip
def test_loopback_by_name_and_by_other_spellings_is_refused(
    api: Api, egress_node: Nodes, host: str
) -> None:
    secret = f"loopback-secret-{abs(hash(host))}"
    with (
        receiver(routes={"/admin": Route(200, body=secret.encode())}) as local,
    ):
        url = f"http://{host}:{local.port}/admin"
        name = f"loopback-{abs(hash(host))}"
        run = run_over_api(api, name, {"http": {"method": "GET", "url": url}})
        assert local.received() == []
    assert run["status"] == "failed"
    assert f"egress to {host.strip('[]')}" in run["last_error"]
    assert "refused: loopback address" in run["last_error"]
    assert_nowhere(api, egress_node, secret)


def test_a_dns_name_that_resolves_to_loopback_is_refused(api: Api, egress_node: Nodes) -> None:
    name = loopback_name()
    with (
        receiver(routes={"/admin": Route(200, body=b"dns-loopback-secret")}) as local,
    ):
        url = f"http://{name}:{local.port}/admin"
        run = run_over_api(api, "dns-loopback", {"http": {"method": "GET", "url": url}})
        assert local.received() == []
    assert run["status"] == "failed"
    assert (
        f"egress to {name} (127." in run["last_error"]
        or f"egress to {name} (::1)" in (run["last_error"])
    )
    assert_nowhere(api, egress_node, "dns-loopback-secret")


def test_a_redirect_to_loopback_from_an_allowed_host_is_not_followed(
    api: Api, egress_node: Nodes
) -> None:
    with (
        receiver(routes={"/admin": Route(200, body=b"behind-the-redirect-secret")}) as local,
    ):
        hop = Route(302, headers=(("Location", f"http://127.0.0.1:{local.port}/admin"),))
        with receiver(host="127.0.0.2", routes={"/go": hop}) as allowed:
            url = f"http://127.0.0.2:{allowed.port}/go"
            run = run_over_api(api, "redirected", {"http": {"method": "GET", "url": url}})
            assert [r.path for r in allowed.received()] == ["/go"]
        assert local.received() == []
    assert run["status"] == "failed" and run["last_error"].startswith("HTTP 302 from GET")
    assert_nowhere(api, egress_node, "behind-the-redirect-secret")


@pytest.mark.parametrize(
    "broker",
    ["redis://:broker-password-secret@attacker.example:6379/0", "${env:CELERY_SECRET_URL}",
     "amqp://guest:guest@10.0.0.5//"],
)  # fmt: skip
def test_a_celery_job_over_the_api_cannot_choose_its_broker(api: Api, broker: str) -> None:
    name = f"own-broker-{abs(hash(broker))}"
    body = {"name": name, "schedule": "@daily",
            "handler": {"celery": {"task": "app.tasks.t", "broker": broker}}}  # fmt: skip
    brokers = "main=redis://127.0.0.2:6379/9"
    with (
        config_as(api, api_handlers="celery:*", api_env="CELERY_*", celery_brokers=brokers),
        api.as_("write") as client,
    ):
        refused = client.post("/api/jobs", json=body)
        assert refused.status_code == 422, refused.text
        assert refused.json()["field"] == "handler.celery.broker"
        assert "broker-password-secret" not in refused.text
        # naming a broker of celery.brokers is how an API job picks one
        named = {**body, "name": f"{name}-named"}
        named["handler"] = {"celery": {"task": "app.tasks.t", "broker": "main"}}
        assert client.post("/api/jobs", json=named).status_code == 201
        assert client.delete(f"/api/jobs/default/{name}-named").status_code == 204
    assert api.sql("SELECT 1 FROM jobs WHERE name = %s", (name,)) == []
    assert "broker-password-secret" not in stored_text(api)


def test_an_api_http_jobs_answer_is_not_kept_without_opt_in(api: Api, egress_node: Nodes) -> None:
    answer = b'{"internal": "kept-body-secret"}'
    with (
        receiver(host="127.0.0.2", routes={"/report": Route(200, body=answer)}) as allowed,
    ):
        url = f"http://127.0.0.2:{allowed.port}/report"
        run = run_over_api(api, "read-answer", {"http": {"method": "GET", "url": url}})
        assert [r.path for r in allowed.received()] == ["/report"]
    assert run["status"] == "succeeded"
    assert json.loads(run["output"])["result"] == {"status": 200, "body_kept": False}
    (handler,) = api.sql("SELECT handler FROM jobs WHERE name = 'read-answer'")[0]
    assert '"keep_body":false' in handler
    with api.as_("read") as client:
        latest = client.get("/api/jobs/default/read-answer/run")
        assert latest.status_code == 200 and "kept-body-secret" not in latest.text
    assert_nowhere(api, egress_node, "kept-body-secret")
    # with the opt-in, a job written over the API keeps it again
    with config_as(api, api_handlers=http_entry(url), api_http_body="keep"):
        body = {"name": "kept-answer", "schedule": "@daily",
                "handler": {"http": {"method": "GET", "url": url}}}  # fmt: skip
        with api.as_("write") as client:
            assert client.post("/api/jobs", json=body).status_code == 201
    (handler,) = api.sql("SELECT handler FROM jobs WHERE name = 'kept-answer'")[0]
    assert "keep_body" not in handler


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
        with with_cookie(api, "198.51.100.13", session) as forged:
            answers = [
                browser.get("/api/jobs"),
                forged.put("/api/tenants/doomed/limit", json=LIMIT, headers={"X-CSRF-Token": csrf}),
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
    assert "secure" not in cookie_attributes(signed), "plain HTTP on loopback"
    assert "strict-transport-security" not in signed.headers
    assert_no_secret(api, [*answers, done, signed], *guesses, *api.tokens.values())


def test_by_default_no_local_process_can_forge_the_audited_source(api: Api, tmp_path: Path) -> None:
    with (
        web_process(api.settings, tmp_path) as default_web,
        httpx.Client(
            base_url=default_web.url,
            headers={
                "Authorization": f"Bearer {api.tokens['admin']}",
                "X-Forwarded-For": "198.51.100.77",
            },
            timeout=10,
        ) as forged,
    ):
        assert forged.put("/api/tenants/spoofed/limit", json=LIMIT).status_code == 200
    sources = api.sql("SELECT source FROM api_audit WHERE tenant_id = 'spoofed'")
    assert sources == [("127.0.0.1",)], "the audit trail records the real peer"


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


def test_a_tenant_token_cannot_create_jobs_past_its_cap(api: Api) -> None:
    token = tenant_token(api, "capped-writer", "write", "capped")
    set_quota(api, "capped", max_jobs=2)
    with allowing(api, HANDLER), api.web.client(token) as client:
        for name in ("one", "two"):
            assert client.post("/api/jobs", json=job(name, "capped")).status_code == 201
        refused = client.post("/api/jobs", json=job("three", "capped"))
        assert refused.status_code == 409, refused.text
        body = refused.json()
        assert body["field"] == "max_jobs" and "max_jobs 2" in body["message"]
        apply = client.post(
            "/api/jobs:apply",
            json=[job("two", "capped"), job("four", "capped"), job("five", "capped")],
        )
        assert apply.status_code == 409  # all or nothing
        no_token_in(api, refused.text, apply.text)
    assert count(api, "SELECT count(*) FROM jobs WHERE tenant_id = 'capped'") == 2


def test_a_tenant_token_cannot_run_a_job_every_second_keeping_everything(api: Api) -> None:
    token = tenant_token(api, "greedy-writer", "write", "greedy")
    set_quota(api, "greedy", min_period_s=60, max_output_limit=4096, max_keep_for_s=86400)
    small = {"output_limit": "4KiB"}
    with allowing(api, HANDLER), api.web.client(token) as client:
        for extra, field in (
            ({"schedule": "@every 1s", **small}, "schedule"),
            ({"output_limit": "256KiB"}, "output_limit"),
            ({"keep_for": "3650d", **small}, "keep_for"),
        ):
            refused = client.post("/api/jobs", json=job("greedy", "greedy", **extra))
            assert refused.status_code == 422, refused.text
            assert refused.json()["field"] == field and "\n" not in refused.json()["message"]
        assert client.post("/api/jobs", json=job("modest", "greedy", **small)).status_code == 201
    assert count(api, "SELECT count(*) FROM jobs WHERE tenant_id = 'greedy'") == 1


def test_two_requests_racing_for_a_tenants_last_job_cannot_both_win(api: Api) -> None:
    token = tenant_token(api, "racer", "write", "racing")
    set_quota(api, "racing", max_jobs=1)
    with allowing(api, HANDLER), api.web.client(token) as client, ThreadPoolExecutor(4) as pool:
        answers = list(
            pool.map(lambda i: client.post("/api/jobs", json=job(f"r{i}", "racing")), range(4))
        )
    assert sorted(a.status_code for a in answers) == [201, 409, 409, 409]
    assert count(api, "SELECT count(*) FROM jobs WHERE tenant_id = 'racing'") == 1
    assert count(api, "SELECT count(*) FROM api_audit WHERE tenant_id = 'racing'") == 1


def test_a_backfill_past_the_tenants_pending_slots_is_refused(api: Api) -> None:
    token = tenant_token(api, "filler", "write", "filling")
    set_quota(api, "filling", max_backfill_slots=10)
    day = {"from": "2026-01-01T00:00:00Z", "to": "2026-01-01T06:00:00Z"}  # 6 hourly slots
    with allowing(api, HANDLER), api.web.client(token) as client:
        assert client.post("/api/jobs", json=job("hourly", "filling")).status_code == 201
        first = client.post("/api/jobs/filling/hourly/backfill", json=day)
        assert first.status_code == 201, first.text
        refused = client.post("/api/jobs/filling/hourly/backfill", json=day)
        assert refused.status_code == 409, refused.text
        assert refused.json()["field"] == "max_backfill_slots"
        no_token_in(api, refused.text)
    assert count(api, "SELECT count(*) FROM backfills WHERE tenant_id = 'filling'") == 1


def test_max_parallel_past_the_tenants_cap_is_refused(api: Api) -> None:
    token = tenant_token(api, "wide-writer", "write", "narrow")
    set_quota(api, "narrow", max_parallel=2)
    window = {"from": "2026-01-01T00:00:00Z", "to": "2026-01-01T06:00:00Z", "max_parallel": 50}
    with allowing(api, HANDLER), api.web.client(token) as client:
        wide = job("wide", "narrow", overlap="allow", max_concurrent=50)
        refused = client.post("/api/jobs", json=wide)
        assert refused.status_code == 422 and refused.json()["field"] == "max_concurrent"
        assert client.post("/api/jobs", json=job("slim", "narrow")).status_code == 201
        backfill = client.post("/api/jobs/narrow/slim/backfill", json=window)
        assert backfill.status_code == 422 and backfill.json()["field"] == "max_parallel"
        no_token_in(api, refused.text, backfill.text)
    assert count(api, "SELECT count(*) FROM jobs WHERE tenant_id = 'narrow'") == 1
    assert count(api, "SELECT count(*) FROM backfills WHERE tenant_id = 'narrow'") == 0


def test_a_huge_search_term_and_page_size_are_refused(api: Api) -> None:
    term = "x" * 10_000
    with api.as_("read") as client:
        for path in (
            f"/api/jobs?q={term}",
            f"/api/schedule?expr={term}",
            f"/api/runs?job={term}",
            "/api/jobs?limit=100000",
            "/api/runs?limit=100000",
            "/api/backfills?limit=100000",
        ):
            answer = client.get(path)
            assert answer.status_code == 422, (path[:40], answer.text[:200])
            assert term not in answer.text and len(answer.content) < 1000
        assert client.get("/api/jobs?q=rollup&limit=500").status_code == 200
    with api.as_("admin") as client:
        assert client.get("/api/tokens/audit?limit=100000").status_code == 422


def test_one_token_holding_slow_requests_does_not_starve_another(api: Api) -> None:
    hog = tenant_token(api, "hog", "write", "hogging")
    with allowing(api, HANDLER), api.web.client(hog) as client:
        assert client.post("/api/jobs", json=job("slow", "hogging")).status_code == 201
    audited = count(api, "SELECT count(*) FROM api_audit WHERE tenant_id = 'hogging'")
    pause = "/api/jobs/hogging/slow/pause"
    with ThreadPoolExecutor(10) as pool, api.web.client(hog) as client:
        with row_locked(api, "hogging", "slow"):
            calls = [pool.submit(client.post, pause, json={"note": "hog"}) for _ in range(10)]
            until(lambda: sum(c.done() for c in calls) == 6, "six requests refused at once", 20)
            refused = [c.result() for c in calls if c.done()]
            assert {r.status_code for r in refused} == {429}
            assert all(r.headers["retry-after"] == "1" for r in refused)
            until(lambda: waiting_on_locks(api) == 4, "four requests held in flight", 20)
            with api.as_("read") as other:  # another token is served meanwhile
                assert other.get("/api/jobs?tenant=hogging").status_code == 200
            no_token_in(api, *(r.text for r in refused))
        answers = [c.result(timeout=30) for c in calls]
    assert sorted(a.status_code for a in answers) == [200] * 4 + [429] * 6
    paused = count(api, "SELECT count(*) FROM api_audit WHERE tenant_id = 'hogging'")
    assert paused - audited == 4  # the refused ones wrote nothing


# --- Database roles and webhooks ---------------------------------------------------------


def test_a_replayed_webhook_is_rejected_by_the_documented_receiver(
    api: Api, egress_node: Nodes
) -> None:
    """A node delivers a failed event to the receiver of docs/alerts.md, which accepts it;
    the same request sent again is dropped, and one sent 6 minutes later is refused."""
    handled: list[dict[str, Any]] = []
    captured: list[tuple[dict[str, str], bytes]] = []
    os.environ[HOOK_SECRET_ENV] = HOOK_SECRET
    try:
        docs = docs_receiver(HOOK_SECRET_ENV)
    finally:
        del os.environ[HOOK_SECRET_ENV]
    docs["handle"] = handled.append
    with serve_docs_receiver(docs, "127.0.0.2", captured) as url:

        async def rule() -> None:
            async with AlertStore.open(api.settings) as alerts:
                await alerts.add_rule(
                    AlertRule.build(
                        "replayed", url, events="failed", job="hooked", secret_env=HOOK_SECRET_ENV
                    )
                )

        with config_as(api, api_handlers="http:GET http://127.0.0.1:9/"):
            with api.as_("write") as client:
                job = {"name": "hooked", "schedule": "@daily",
                       "handler": "http:GET http://127.0.0.1:9/nothing-here"}  # fmt: skip
                assert client.post("/api/jobs", json=job).status_code == 201
            asyncio.run(rule())
            with api.as_("write") as client:
                assert client.post("/api/jobs/default/hooked/trigger").status_code == 200
            until(lambda: handled, "the failed event to reach the documented receiver", 60)
        (event,) = handled
        assert (event["event"], event["job"]) == ("failed", "hooked")
        headers, body = captured[0]
        assert headers["webhook-signature"].startswith("v1,")

        # the very request again: verified, acknowledged, not handled twice
        replay = httpx.post(url, content=body, headers=headers, timeout=10)
        assert replay.status_code == 204 and len(handled) == 1
        # the same bytes 6 minutes later: too old, refused
        real_time = docs["time"]
        docs["time"] = types.SimpleNamespace(time=lambda: real_time.time() + 360)
        late = httpx.post(url, content=body, headers=headers, timeout=10)
        docs["time"] = real_time
        assert late.status_code == 401
        # a fresh timestamp without a fresh signature, or a changed body: refused
        fresh = {**headers, "webhook-timestamp": str(int(time.time()) + 1)}
        assert httpx.post(url, content=body, headers=fresh, timeout=10).status_code == 401
        forged = body.replace(b"hooked", b"hacked")
        assert httpx.post(url, content=forged, headers=headers, timeout=10).status_code == 401
        assert len(handled) == 1
    assert HOOK_SECRET not in stored_text(api) and HOOK_SECRET not in egress_node.logs()
    assert HOOK_SECRET[6:] not in egress_node.logs()


def test_the_web_role_cannot_alter_the_schema_or_write_runs(api: Api, logins: Logins) -> None:
    grant_roles(api.settings, logins)
    url, schema = logins.as_web(api.settings).database_url, api.settings.schema
    columns = count(
        api, "SELECT count(*) FROM information_schema.columns WHERE table_schema = %s", schema
    )
    runs = count(api, "SELECT count(*) FROM runs")
    for statement in (
        "ALTER TABLE jobs ADD COLUMN evil text",
        "ALTER TABLE runs DISABLE TRIGGER ALL",
        "DROP TABLE api_audit",
        "INSERT INTO runs (job_id, tenant_id, job_name, scheduled_for, status)"
        " VALUES (gen_random_uuid(), 'acme', 'forged', now(), 'succeeded')",
        "UPDATE runs SET status = 'succeeded'",
        "DELETE FROM runs",
        "UPDATE config SET value = 'shell:*'",
    ):
        assert role_refused(url, schema, statement) == "InsufficientPrivilege", statement
    assert (
        count(
            api, "SELECT count(*) FROM information_schema.columns WHERE table_schema = %s", schema
        )
        == columns
    )
    # The cluster's own nodes go on ending runs meanwhile: none deleted, none forged.
    assert count(api, "SELECT count(*) FROM runs") >= runs
    assert count(api, "SELECT count(*) FROM runs WHERE job_name = 'forged'") == 0


def test_a_tenant_token_reads_only_its_tenants_audit_trail(api: Api) -> None:
    made = invoke(api.settings, "tokens", "create", "audit-probe", "--role", "read")
    assert made.exit_code == 0, made.output
    probe_secret = made.stdout.splitlines()[0]
    api.tokens["audit-probe"] = probe_secret
    assert invoke(api.settings, "tenants", "quota", "other", "--max-jobs", "7").exit_code == 0
    handlers = [str(v) for (v,) in api.sql("SELECT value FROM config WHERE key = 'api.handlers'")]
    set_again = invoke(api.settings, "config", "set", "api.handlers", *(handlers or [""]))
    assert set_again.exit_code == 0, set_again.output
    own = tenant_token(api, "own-admin", "admin", "own")
    with allowing(api, HANDLER), api.web.client(own) as client:
        assert client.post("/api/jobs", json=job("mine", "own")).status_code == 201
        answer = client.get("/api/tokens/audit?limit=1000")
        assert answer.status_code == 200
        entries = answer.json()["entries"]
    assert entries and {e["tenant"] for e in entries} == {"own"}
    no_token_in(api, answer.text)  # nor in any row, the CLI's included
    actions = {r[0] for r in api.sql("SELECT action FROM api_audit WHERE token_name LIKE 'cli:%%'")}
    assert {"create token", "set config", "set quota"} <= actions
    with api.as_("acme") as scoped_writer:
        assert scoped_writer.get("/api/tokens/audit").status_code == 403


def test_a_tenant_token_audits_only_its_tenants_slots(api: Api) -> None:
    """GET /api/audit with a token scoped to `own`: another tenant's slots (missing ones
    too) never appear, whether it names that tenant, its job, or nothing."""
    admin = tenant_token(api, "ledger-admin", "admin", None)
    reader = tenant_token(api, "ledger-reader", "read", "own")
    with allowing(api, HANDLER), api.web.client(admin) as client:
        for name, tenant in (("ledger-mine", "own"), ("ledger-theirs", "other")):
            made = client.post("/api/jobs", json=job(name, tenant, schedule="@every 1m"))
            assert made.status_code == 201, made.text
    # Both made ten minutes ago: each expects slots, unrecorded (missing) unless a node of
    # this module's fixtures (still running) took the latest.
    api.sql(
        "UPDATE job_revisions SET at = now() - interval '10 minutes' "
        "WHERE job_name IN ('ledger-mine', 'ledger-theirs')"
    )
    with api.web.client(admin) as client:
        year = {"from": "2026-01-01T00:00:00Z", "to": "2026-12-31T00:00:00Z"}
        full = client.get("/api/audit", params=year)
    assert full.status_code == 422  # longer than 92 days
    with api.web.client(reader) as client:
        asked = [
            {},
            {"tenant": "other"},
            {"job": "ledger-theirs"},
            {"tenant": "other", "job": "ledger-theirs"},
        ]
        answers = []
        for params in asked:
            now = api.sql("SELECT now()")[0][0]
            window = {
                "from": (now - timedelta(minutes=30)).isoformat(),
                "to": (now + timedelta(minutes=1)).isoformat(),
            }
            answer = client.get("/api/audit", params={**window, **params})
            assert answer.status_code == 200, answer.text
            answers.append([json.loads(line) for line in answer.text.splitlines()])
    slots = [line for line in answers[0] if line["type"] == "slot"]
    assert slots and {(s["tenant"], s["job"]) for s in slots} == {("own", "ledger-mine")}
    assert {s["verdict"] for s in slots} <= {"missing", "pending", "ran"}
    assert "missing" in {s["verdict"] for s in slots}
    for lines in answers[1:]:
        assert [line["type"] for line in lines] == ["summary"]
        assert lines[0]["jobs"] == []
    for lines in answers:
        assert "ledger-theirs" not in json.dumps(lines)


# --- Literal secrets in jobs an operator wrote -------------------------------------------

LITERAL_BEARER = "Bearer literal-secret-123"
LITERAL_DB = "postgresql://app:dbpass-456@db/app"


def test_a_read_token_sees_no_literal_secret_and_search_never_matches_inside_one(
    api: Api,
) -> None:
    handlers = {
        "bearer-call": json.dumps(
            {
                "http": {
                    "url": "https://example.com/hook",
                    "headers": {"Authorization": LITERAL_BEARER},
                }
            }
        ),
        "db-dump": f"shell:/usr/bin/pg_dump {LITERAL_DB}",
        "pg-env": "shell:PGPASSWORD=pgpass-789 /usr/bin/psql -c 'select 1'",
    }
    for name, handler in handlers.items():
        value = json.loads(handler) if handler.startswith("{") else handler
        spec = JobSpec.from_mapping({"name": name, "schedule": "@daily", "handler": value})

        async def add(spec: JobSpec = spec) -> None:
            async with JobStore.open(api.settings) as store:
                await store.definitions.add(spec)

        asyncio.run(add())
    literals = ("literal-secret-123", "dbpass-456", "pgpass-789")
    with api.as_("read") as reader:
        for name in handlers:
            shown = reader.get(f"/api/jobs/default/{name}")
            assert shown.status_code == 200, shown.text
            assert not any(secret in shown.text for secret in literals), shown.text
            assert "***" in shown.json()["handler"]
        listed = reader.get("/api/jobs?limit=500").text
        assert not any(secret in listed for secret in literals)
        for probe in ("dbpass-4", "literal-secret", "pass-78", "Bearer lit"):
            found = reader.get("/api/jobs", params={"q": probe})
            assert found.status_code == 200 and found.json()["jobs"] == [], probe
        assert [
            j["name"] for j in reader.get("/api/jobs", params={"q": "pg_dump"}).json()["jobs"]
        ] == ["db-dump"]
    for name in handlers:
        cli = invoke(api.settings, "jobs", "show", name, "--json")
        text = invoke(api.settings, "jobs", "show", name)
        assert cli.exit_code == text.exit_code == 0, cli.output
        assert not any(s in cli.output + text.output for s in literals), text.output


# --- Calendars ---------------------------------------------------------------------------


def test_a_job_naming_an_unknown_calendar_or_business_day_0_is_422(api: Api) -> None:
    before = written(api)
    base = {"schedule": "0 9 * * *", "handler": "shell:/bin/true"}
    bodies = [
        {**base, "name": "cal-unknown", "calendar": "nope"},
        {**base, "name": "cal-zero", "calendar": "nope", "business_day": 0},
        {**base, "name": "cal-policy", "on_excluded": "next-business-day"},
        {**base, "name": "cal-bad-policy", "calendar": "nope", "on_excluded": "sometimes"},
    ]
    with allowed(api, "shell:/bin/true"), api.as_("admin") as admin:
        answers = [admin.post("/api/jobs", json=body) for body in bodies]
    fields = []
    for answer in answers:
        assert answer.status_code == 422, answer.text
        assert "\n" not in answer.json()["message"]
        fields.append(answer.json()["field"])
    assert fields == ["calendar", "business_day", "on_excluded", "on_excluded"]
    assert written(api) == before
    assert_no_secret(api, answers, *api.tokens.values())


def test_calendars_and_windows_cannot_be_written_over_the_api(api: Api) -> None:
    before = api.sql("SELECT count(*) FROM calendars")[0][0]
    with api.as_("admin") as admin:
        answers = [
            admin.put("/api/calendars/office", json={"weekdays": "mon-sun"}),
            admin.post("/api/calendars", json={"name": "office"}),
            admin.delete("/api/calendars/office"),
            admin.post("/api/windows", json={"from": "2030-01-01T00:00:00Z"}),
            admin.delete("/api/windows/1"),
        ]
        listed = admin.get("/api/calendars")
        assert admin.get("/api/windows").json() == []
    assert [a.status_code for a in answers] == [405, 405, 405, 405, 404]
    assert listed.status_code == 200
    assert api.sql("SELECT count(*) FROM calendars")[0][0] == before
    assert api.sql("SELECT count(*) FROM windows")[0][0] == 0
    assert_no_secret(api, [*answers, listed], *api.tokens.values())


# --- Dependencies between jobs -----------------------------------------------------------

GATED = "shell:/bin/true"


def refused_edge(api: Api, who: str, jobs: list[dict[str, Any]], needle: str) -> None:
    """``jobs`` applied by ``who``: one line of 422 naming ``after`` and ``needle``, nothing
    written (no job, no edge, no audit row), no secret in the answer or the log."""
    before = written(api), api.sql("SELECT count(*) FROM job_edges")[0][0]
    with api.as_(who) as client:
        answer = client.post("/api/jobs:apply", json={"jobs": jobs})
    assert answer.status_code == 422, answer.text
    found = answer.json()
    assert found["field"] == "after" and needle in found["message"], found
    assert "\n" not in found["message"]
    assert (written(api), api.sql("SELECT count(*) FROM job_edges")[0][0]) == before
    assert_no_secret(api, [answer], *api_secrets(api))


def test_an_upstream_in_another_tenant_is_unknown_and_nothing_is_written(api: Api) -> None:
    with allowed(api, GATED):
        with api.as_("admin") as admin:
            made = {"name": "payroll-export", "schedule": "@hourly", "handler": GATED}
            assert admin.post("/api/jobs", json={**made, "tenant": "globex"}).status_code == 201
        try:
            spy = {"name": "spy", "schedule": "@hourly", "handler": GATED, "tenant": "acme"}
            # The answer for another tenant's job is the answer for a name nobody has: a
            # scoped token learns nothing of the names of other tenants' jobs.
            refused_edge(api, "acme", [{**spy, "after": "payroll-export"}], "unknown upstream")
            refused_edge(api, "acme", [{**spy, "after": "no-such-job"}], "unknown upstream")
        finally:
            with api.as_("admin") as admin:
                admin.delete("/api/jobs/globex/payroll-export")


def test_a_cycle_is_refused_naming_it_and_nothing_is_written(api: Api) -> None:
    with allowed(api, GATED):
        ring = [
            {"name": n, "schedule": "@hourly", "handler": GATED, "after": up}
            for n, up in (("ring-a", "ring-c"), ("ring-b", "ring-a"), ("ring-c", "ring-b"))
        ]
        refused_edge(api, "write", ring, "cycle: ring-")


# --- Revisions ------------------------------------------------------------------------------


def _operator_writes(api: Api, *specs: JobSpec) -> None:
    """Jobs written by an operator on the owner's host, one apply each (a revision each)."""

    async def go() -> None:
        async with JobStore.open(api.settings) as store:
            for spec in specs:
                await store.definitions.apply([spec])

    asyncio.run(go())


def test_a_rollback_to_a_handler_the_allow_list_refuses_is_403(api: Api) -> None:
    # Revision 1 ran a handler the operator wrote from the CLI; the API may write only
    # the safe one. Rolling back over the API is writing that handler: refused.
    _operator_writes(
        api,
        JobSpec.build("reverted", "@hourly", "os:system"),
        JobSpec.build("reverted", "@hourly", HANDLER),
    )
    with allowing(api, HANDLER):
        before = (written(api), api.sql("SELECT * FROM job_revisions ORDER BY 1, 2, 3"))
        with api.as_("write") as client:
            answer = client.post("/api/jobs/default/reverted/rollback", json={"to": 1})
        assert answer.status_code == 403, answer.text
        assert answer.json()["field"] == "handler"
        assert (written(api), api.sql("SELECT * FROM job_revisions ORDER BY 1, 2, 3")) == before
        assert api.sql("SELECT handler FROM jobs WHERE name = 'reverted'") == [(HANDLER,)]


def test_a_tenant_token_cannot_read_or_roll_back_another_tenants_history(api: Api) -> None:
    _operator_writes(
        api,
        JobSpec.build("ledger", "@hourly", HANDLER, tenant="globex"),
        JobSpec.build("ledger", "@daily", HANDLER, tenant="globex"),
    )
    with allowing(api, HANDLER):
        before = api.sql("SELECT * FROM job_revisions ORDER BY 1, 2, 3")
        token = tenant_token(api, "acme-history", "write", "acme")
        with api.web.client(token) as acme:
            read = acme.get("/api/jobs/globex/ledger/revisions")
            undo = acme.post("/api/jobs/globex/ledger/rollback", json={"to": 1})
        # The answers for another tenant's job are those for a name nobody has.
        assert (read.status_code, undo.status_code) == (404, 404)
        assert "@hourly" not in read.text + undo.text
        assert api.sql("SELECT * FROM job_revisions ORDER BY 1, 2, 3") == before


# -- runs with inputs ------------------------------------------------------------------------

INPUT_JOB = {
    "name": "regional",
    "schedule": "@hourly",
    "handler": GATED,
    "payload": {"region": "eu"},
    "payload_schema": {
        "type": "object",
        "properties": {"region": {"enum": ["eu", "us"]}},
        "required": ["region"],
    },
}


def flights_and_backfills(api: Api, tenant: str, name: str) -> tuple[int, int]:
    """What is queued for one job. Counted for that job alone: a module node advances the
    backfills and flights other tests left to their tenants while this test runs."""
    mine = "JOIN jobs j ON j.id = x.job_id WHERE j.tenant_id = %s AND j.name = %s"
    return (
        int(api.sql(f"SELECT count(*) FROM flights x {mine}", (tenant, name))[0][0]),
        int(api.sql(f"SELECT count(*) FROM backfills x {mine}", (tenant, name))[0][0]),
    )


def test_a_trigger_with_bad_input_is_422_and_writes_nothing(api: Api) -> None:
    """A payload its schema refuses, both payload forms, a slot in the future or off the
    schedule, a payload that is not an object, an unknown key: 422 naming the field."""
    with allowed(api, GATED), api.as_("write") as client:
        assert client.post("/api/jobs", json=INPUT_JOB).status_code == 201
        try:
            before = (written(api), flights_and_backfills(api, "default", "regional"))
            cases = [
                ({"payload": {"region": "mars"}}, "payload"),
                ({"merge_payload": {"region": None}}, "merge_payload"),
                ({"payload": {"region": "us"}, "merge_payload": {}}, "merge_payload"),
                ({"payload": ["region"]}, "payload"),
                ({"slot": "2999-01-01T00:00:00+00:00"}, "slot"),
                ({"slot": "2026-01-01T00:30:00+00:00"}, "slot"),
                ({"slot": "yesterday"}, "slot"),
                ({"command": "rm -rf /"}, "command"),
            ]
            answers = []
            for body, field in cases:
                answer = client.post("/api/jobs/default/regional/trigger", json=body)
                assert answer.status_code == 422, (body, answer.text)
                assert answer.json()["field"] == field, (body, answer.json())
                assert "\n" not in answer.json()["message"]
                answers.append(answer)
            assert (written(api), flights_and_backfills(api, "default", "regional")) == before
            assert_no_secret(api, answers, *api_secrets(api))
        finally:
            client.delete("/api/jobs/default/regional")


def test_a_schema_with_a_remote_ref_never_fetches_it(api: Api) -> None:
    """A `$ref` to an address (here the cloud metadata one) is not retrieved: the schema
    cannot be applied, so the job is refused, and nothing was asked of that address."""
    with allowed(api, GATED), receiver() as spy:
        schema = {"$ref": f"{spy.url}/schema.json"}
        before = written(api)
        with api.as_("write") as client:
            answer = client.post("/api/jobs", json={**INPUT_JOB, "payload_schema": schema})
            metadata = {"$ref": f"http://{METADATA}/latest/meta-data/"}
            second = client.post("/api/jobs", json={**INPUT_JOB, "payload_schema": metadata})
        for found in (answer, second):
            assert found.status_code == 422, found.text
            assert found.json()["field"] == "payload_schema"
        assert spy.received() == [] and written(api) == before


def test_a_huge_or_invalid_schema_is_refused(api: Api) -> None:
    with allowed(api, GATED), api.as_("write") as client:
        before = written(api)
        huge = {"type": "object", "description": "x" * 70_000}
        for schema in (huge, {"type": "objekt"}, {"$schema": "https://example.com/mine"}):
            answer = client.post("/api/jobs", json={**INPUT_JOB, "payload_schema": schema})
            assert answer.status_code == 422, answer.text
            assert answer.json()["field"] == "payload_schema"
        assert written(api) == before


def test_a_tenant_token_cannot_trigger_another_tenants_job_with_input(api: Api) -> None:
    with allowed(api, GATED):
        with api.as_("admin") as admin:
            made = {**INPUT_JOB, "tenant": "globex"}
            assert admin.post("/api/jobs", json=made).status_code == 201
        try:
            before = flights_and_backfills(api, "globex", "regional")
            with api.as_("acme") as acme:
                for body in ({"payload": {"region": "us"}}, {"slot": "2026-01-01T00:00:00Z"}):
                    answer = acme.post("/api/jobs/globex/regional/trigger", json=body)
                    assert answer.status_code in (403, 404), answer.text
            with api.as_("read") as reader:
                answer = reader.post("/api/jobs/globex/regional/trigger", json={})
                assert answer.status_code == 403, answer.text
            assert flights_and_backfills(api, "globex", "regional") == before
        finally:
            with api.as_("admin") as admin:
                admin.delete("/api/jobs/globex/regional")


# --- Expectations --------------------------------------------------------------------------


def test_an_assert_holding_python_is_refused_and_nothing_is_written(api: Api) -> None:
    """``--assert`` is read by a parser of names, comparisons and numbers: code in it is bad
    input, never run on a node; so are expectations that cannot hold together."""
    before = written(api)
    base = {"schedule": "0 9 * * *", "handler": "shell:/bin/true"}
    bodies = [
        {**base, "name": "x1", "assert": "__import__('os').system('id') > 0"},
        {**base, "name": "x2", "assert": "rows > 0 or exec('1')"},
        {**base, "name": "x3", "assert": "ROWS > 0"},
        {**base, "name": "x4", "expect_min": "10m", "expect_max": "1m"},
        {**base, "name": "x5", "deadline": "25:00"},
        {**base, "name": "x6", "assert_fails": True},
    ]
    with allowed(api, "shell:/bin/true"), api.as_("admin") as admin:
        answers = [admin.post("/api/jobs", json=body) for body in bodies]
    fields = []
    for answer in answers:
        assert answer.status_code == 422, answer.text
        assert "\n" not in answer.json()["message"]
        fields.append(answer.json()["field"])
    assert fields == ["assert", "assert", "assert", "expect_min", "deadline", "assert_fails"]
    assert written(api) == before
    assert_no_secret(api, answers, *api.tokens.values())


# --- Who may run and feed what ----------------------------------------------------------


def test_a_write_token_cannot_run_feed_or_rerun_a_job_written_outside_the_api(api: Api) -> None:
    """A job of the CLI, a file or a Registry ran only what the operator wrote: a token may
    trigger, rerun or backfill it only when it opts in (api_run), and feed it a payload only
    when it also has a payload_schema."""
    cli_job = JobSpec.build("operator-job", "@hourly", "shell:/usr/local/bin/rotate-keys")
    _operator_writes(api, cli_job)
    slot = "2026-01-01T00:00:00+00:00"
    try:
        before = (written(api), flights_and_backfills(api, "default", "operator-job"))
        with api.as_("write") as client:
            path = "/api/jobs/default/operator-job"
            answers = [
                client.post(f"{path}/trigger"),
                client.post(f"{path}/trigger", json={"payload": {"cmd": "x"}}),
                client.post(f"{path}/trigger", json={"merge_payload": {"cmd": "x"}}),
                client.post(f"{path}/trigger", json={"slot": slot}),
                client.post(f"{path}/backfill", json={"from": slot, "to": slot}),
            ]
            for answer in answers:
                assert answer.status_code == 403, answer.text
                assert answer.json()["field"] == "api_run"
            assert (written(api), flights_and_backfills(api, "default", "operator-job")) == before
            # The operator opts in: a trigger runs it; a payload still needs a schema.
            _operator_writes(api, replace(cli_job, api_run=True))
            assert client.post(f"{path}/trigger").status_code == 200
            fed = client.post(f"{path}/trigger", json={"payload": {"cmd": "x"}})
            assert fed.status_code == 422 and fed.json()["field"] == "payload", fed.text
            schema = {"type": "object", "properties": {"cmd": {"enum": ["x"]}}}
            _operator_writes(api, replace(cli_job, api_run=True, payload_schema=schema))
            fed = client.post(f"{path}/trigger", json={"payload": {"cmd": "x"}})
            assert fed.status_code == 200, fed.text
    finally:
        with api.as_("admin") as admin:
            admin.delete("/api/jobs/default/operator-job")


# --- Bounded checks -----------------------------------------------------------------------


def exponential_schema(levels: int) -> dict[str, Any]:
    """The issue's 1.2 KB schema: ``levels`` of anyOf over two $refs of the level below."""
    defs: dict[str, Any] = {"d0": {"type": "string"}}
    for i in range(1, levels + 1):
        ref = {"$ref": f"#/$defs/d{i - 1}"}
        defs[f"d{i}"] = {"anyOf": [ref, dict(ref)]}
    return {"$defs": defs, "type": "object", "properties": {"x": {"$ref": f"#/$defs/d{levels}"}}}


def test_a_schema_outside_the_bounded_dialect_is_422_and_writes_nothing(api: Api) -> None:
    schemas = [
        exponential_schema(15),
        {"$defs": {"a": {"$ref": "#/$defs/a"}}, "$ref": "#/$defs/a"},
        {"type": "object", "properties": {"a": {"type": "string", "pattern": "^(a+)+$"}}},
        {"type": "object", "properties": {"a": {"type": "array", "uniqueItems": True}}},
    ]
    with allowed(api, GATED), api.as_("write") as client:
        before = written(api)
        for schema in schemas:
            answer = client.post("/api/jobs", json={**INPUT_JOB, "payload_schema": schema})
            assert answer.status_code == 422, answer.text
            assert answer.json()["field"] == "payload_schema"
        assert written(api) == before


def test_a_payload_nested_500_deep_is_422_and_an_older_one_does_not_break_the_list(
    api: Api,
) -> None:
    deep: dict[str, Any] = {}
    for _ in range(500):
        deep = {"a": deep}
    with allowed(api, GATED), api.as_("write") as client:
        before = written(api)
        answer = client.post("/api/jobs", json={**INPUT_JOB, "name": "deep", "payload": deep})
        assert answer.status_code == 422, answer.text
        assert "nested" in answer.json()["message"]
        assert written(api) == before
        # One stored by an older release: the admin's list and the job's page still answer.
        assert client.post("/api/jobs", json={**INPUT_JOB, "name": "deep"}).status_code == 201
        try:
            api.sql(
                "UPDATE jobs SET payload = %s::jsonb, payload_schema = NULL WHERE name = 'deep'",
                (json.dumps(deep),),
            )
            with api.as_("admin") as admin:
                listed = admin.get("/api/jobs")
                assert listed.status_code == 200, listed.text
                shown = admin.get("/api/jobs/default/deep")
                assert shown.status_code == 200, shown.text
                assert "nested deeper" in json.dumps(shown.json()["payload"])
        finally:
            client.delete("/api/jobs/default/deep")


def test_240_nested_parentheses_in_an_assert_are_422(api: Api) -> None:
    text = "(" * 240 + "rows > 0" + ")" * 240
    body = {"name": "nested", "schedule": "@hourly", "handler": GATED, "assert": text}
    with allowed(api, GATED), api.as_("write") as client:
        before = written(api)
        answer = client.post("/api/jobs", json=body)
    assert answer.status_code == 422, answer.text
    assert answer.json()["field"] == "assert"
    assert written(api) == before


def worst_schema() -> dict[str, Any]:
    """The slowest schema the dialect lets through that we found: each item of a long
    array tried against every branch of anyOf over $refs, near the cap on subschemas."""
    defs: dict[str, Any] = {"d0": {"type": "object", "required": ["never"]}}
    for i in range(1, 6):
        ref = {"$ref": f"#/$defs/d{i - 1}"}
        defs[f"d{i}"] = {"anyOf": [ref, dict(ref), {"type": "integer"}]}
    items = {"$ref": "#/$defs/d5"}
    return {"$defs": defs, "type": "object", "properties": {"x": {"type": "array", "items": items}}}


def test_health_answers_while_the_worst_payload_is_checked(api: Api) -> None:
    """A write token's slowest request (the worst schema in the dialect, a payload near
    1 MiB) never holds the event loop: /api/health answers while it is handled, and the
    check ends at its budget with a 422 the audit trail records."""
    job = {**INPUT_JOB, "name": "worst", "payload": {}, "payload_schema": worst_schema()}
    with allowed(api, GATED), api.as_("write") as client:
        assert client.post("/api/jobs", json=job).status_code == 201, "the schema is allowed"
    try:
        audited = count(api, "SELECT count(*) FROM api_audit WHERE action = 'refused'")
        queued = flights_and_backfills(api, "default", "worst")
        payload = {"x": [1.5] * 150_000}
        with (
            ThreadPoolExecutor(1) as pool,
            api.web.client() as health,
            api.as_("write") as client,
        ):
            slow = pool.submit(
                client.post, "/api/jobs/default/worst/trigger", json={"payload": payload}
            )
            answered_during = 0
            while not slow.done():
                assert health.get("/api/health").status_code == 200
                answered_during += 0 if slow.done() else 1
            answer = slow.result()
        assert answer.status_code == 422, answer.text
        assert "budget" in answer.json()["message"]
        assert answered_during > 0, "health answered while the payload was being checked"
        refusals = count(api, "SELECT count(*) FROM api_audit WHERE action = 'refused'")
        assert refusals == audited + 1
        assert flights_and_backfills(api, "default", "worst") == queued
    finally:
        with api.as_("admin") as admin:
            admin.delete("/api/jobs/default/worst")
