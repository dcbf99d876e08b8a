"""Attacks on a real ``pulse web`` and real nodes, each a named test that shows it refused:
nothing written, no secret in any response, row, log or output. The list, with the threat
model, is in docs/security.md; a new attack goes in both.

Sections: handlers written over the API; secrets and egress; console sessions and sign-in;
quotas and bodies; database roles and webhooks.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from cluster.errors import InvalidInput
from tests.helpers.nodes import Nodes
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


# --- Console sessions and sign-in --------------------------------------------------------


# --- Quotas and bodies -------------------------------------------------------------------


# --- Database roles and webhooks ---------------------------------------------------------
