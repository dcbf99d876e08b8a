"""Attacks on a real ``pulse web`` and real nodes, each a named test that shows it refused:
nothing written, no secret in any response, row, log or output. The list, with the threat
model, is in docs/security.md; a new attack goes in both.

Sections: handlers written over the API; secrets and egress; console sessions and sign-in;
quotas and bodies; database roles and webhooks.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import os
import time
import types
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest

from cluster.alerts.rules import AlertRule
from cluster.errors import InvalidInput
from cluster.store.alerts import AlertStore
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
from tests.helpers.waiting import until
from tests.helpers.web import Api, api_cluster

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


def written(api: Api) -> tuple[Any, ...]:
    """What an API write leaves behind: jobs and audit rows."""
    return api.sql("SELECT (SELECT count(*) FROM jobs), (SELECT count(*) FROM api_audit)")[0]


def secrets(api: Api) -> list[str]:
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
    for secret in secrets(api):
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
    for absent in ("PULSE_DATABASE_URL", "PULSE_REDIS_URL", HIDDEN, *secrets(api)):
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
    "host", ["localhost", "2130706433", "0x7f.1", "0x7f000001", "[::ffff:127.0.0.1]"]
)
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


# --- Quotas and bodies -------------------------------------------------------------------


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
