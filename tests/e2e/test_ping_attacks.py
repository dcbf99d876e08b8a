"""Attacks on the ping endpoint of a real ``pulse web`` (``/api/ping/{token}``, no API token
needed), in the style of test_web_attacks.py: each a named test showing it refused, with
nothing written and no secret in any response, row or log. The list is in docs/security.md.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.helpers.examples import documented, json_differs
from tests.helpers.tenancy import count
from tests.helpers.web import Api, api_cluster, web_process

pytestmark = pytest.mark.e2e

WATCH = {"schedule": "* * * * *", "watch": True, "output_limit": "1KiB"}


@pytest.fixture(scope="module")
def api(database_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Api]:
    with api_cluster(database_url, tmp_path_factory.mktemp("pings")) as running:
        yield running


def watch_job(api: Api, name: str, who: str = "admin", **extra: Any) -> str:
    """A watch job created over the API; its ping URL's token (shown this once)."""
    body = {"name": name, **WATCH, **extra}
    with api.as_(who) as client:
        answer = client.post("/api/jobs", json=body)
    assert answer.status_code == 201, answer.text
    return str(answer.json()["ping_url"]).rsplit("/", 1)[1]


def runs_of(api: Api, name: str, tenant: str = "default") -> list[tuple[Any, ...]]:
    return api.sql(
        "SELECT scheduled_for, status, output FROM runs WHERE job_name = %s AND tenant_id = %s",
        (name, tenant),
    )


def ping(api: Api, path: str, **kw: Any) -> httpx.Response:
    with api.web.client() as client:
        return client.post(f"/api/ping/{path}", **kw)


def test_ping_token_guesses_get_one_404_whether_unknown_or_malformed(api: Api) -> None:
    token = watch_job(api, "guessed")
    answers = [
        ping(api, guess)
        for guess in (
            "A" * 43,  # well-formed, unknown
            token[:-1] + ("A" if token[-1] != "A" else "B"),  # one character off
            token[:20],  # too short
            "%00%ff..%2f",  # not even base64
            "x" * 3000,  # far too long
        )
    ]
    assert {a.status_code for a in answers} == {404}
    assert len({a.content for a in answers}) == 1  # the same body, naming nothing
    assert "guessed" not in answers[0].text and token not in answers[0].text
    assert runs_of(api, "guessed") == []
    answer = ping(api, token)  # the real one still works, answering as docs/web.md shows
    assert answer.status_code == 200, answer.text
    assert json_differs(json.loads("\n".join(documented("docs/web.md#ping"))), answer.json()) == []


def test_a_ping_token_reaches_its_own_tenants_job_only(api: Api) -> None:
    mine = watch_job(api, "nightly", "acme", tenant="acme")
    watch_job(api, "nightly")  # the same name in tenant default
    # A ping carries no tenant, and an API token presented with it changes nothing.
    answer = ping(api, mine, headers={"Authorization": f"Bearer {api.tokens['admin']}"})
    assert answer.status_code == 200
    assert len(runs_of(api, "nightly", "acme")) == 1
    assert runs_of(api, "nightly", "default") == []
    # A ping token is no API token: it reads nothing.
    with api.web.client(mine) as client:
        assert client.get("/api/jobs").status_code == 401


def test_an_oversized_ping_body_is_refused_and_a_large_one_is_cut(api: Api) -> None:
    token = watch_job(api, "chatty")
    assert ping(api, token, content=b"x" * (2 * 1024 * 1024)).status_code == 413
    assert runs_of(api, "chatty") == []
    assert ping(api, token, content=b"y" * (300 * 1024) + b"END").status_code == 200
    ((_, _, output),) = runs_of(api, "chatty")
    assert output["stdout"].endswith("END") and len(output["stdout"].encode()) <= 1024


def test_a_ping_flood_is_throttled_per_token_and_per_source(api: Api, tmp_path: Path) -> None:
    token = watch_job(api, "flooded")
    with (
        web_process(
            api.settings, tmp_path, "--ping-limit", "5", "--ping-source-limit", "12"
        ) as web,
        web.client() as client,
    ):
        codes = [client.post(f"/api/ping/{token}").status_code for _ in range(8)]
        assert codes == [200] * 5 + [429] * 3
        refused = client.post(f"/api/ping/{token}")
        assert int(refused.headers["Retry-After"]) >= 1
        # Guesses from one address: only unknown tokens count against it, 12 a minute.
        guesses = [client.post(f"/api/ping/{'G' * 42}{i}").status_code for i in range(14)]
        assert guesses == [404] * 12 + [429] * 2
    assert len(runs_of(api, "flooded")) == 1  # one slot, one run row


def test_a_flood_of_random_tokens_from_one_address_does_not_429_a_valid_ping(
    api: Api, tmp_path: Path
) -> None:
    """Behind one NAT, a flood of guesses must not make the watch job of a cron beside it
    look late: the valid token is counted on its own, never against the address."""
    token = watch_job(api, "behind-nat")
    with (
        web_process(api.settings, tmp_path, "--ping-source-limit", "20") as web,
        web.client() as client,
    ):
        flood = [client.post(f"/api/ping/{secrets.token_urlsafe(32)}") for _ in range(40)]
        assert {a.status_code for a in flood} == {404, 429}
        assert client.post(f"/api/ping/{token}").status_code == 200
    assert len(runs_of(api, "behind-nat")) == 1


def test_a_ping_to_a_non_watch_jobs_id_or_name_is_404_and_changes_nothing(api: Api) -> None:
    with api.as_("admin") as client:
        created = client.post(
            "/api/jobs", json={"name": "regular", "schedule": "@hourly", "handler": "shell:true"}
        )
    assert created.status_code in (201, 403), created.text
    api.sql(
        "INSERT INTO jobs (id, name, schedule, handler, shard_id, next_run_at, slot_at)"
        " SELECT gen_random_uuid(), 'plain', '@hourly', 'shell:true', 0, now() + interval '1h',"
        " now() + interval '1h' WHERE NOT EXISTS (SELECT 1 FROM jobs WHERE name = 'plain')"
    )
    ((job_id, before),) = api.sql("SELECT id, updated_at FROM jobs WHERE name = 'plain'")
    for target in (str(job_id), "plain", f"{job_id}/start", "plain/fail"):
        assert ping(api, target).status_code == 404
    assert api.sql("SELECT updated_at FROM jobs WHERE name = 'plain'") == [(before,)]
    assert count(api, "SELECT count(*) FROM runs WHERE job_name = 'plain'") == 0


def test_secrets_in_a_ping_body_are_hidden_before_they_are_stored(api: Api) -> None:
    token = watch_job(api, "leaky")
    admin = api.tokens["admin"]
    body = (
        f"curl {api.web.url}/api/ping/{token}\n"
        f"using {admin} and postgres://app:hunter2@db:5432/x\n"
        "PASSWORD=s3cret-value done\n"
    )
    answer = ping(api, token, content=body.encode())
    assert answer.status_code == 200
    ((_, _, output),) = runs_of(api, "leaky")
    stored = json.dumps(output)
    for secret in (token, admin, "hunter2", "s3cret-value"):
        assert secret not in stored and secret not in answer.text
    assert "done" in output["stdout"]
    # Nor in the server's log, where the ping's path would otherwise appear.
    assert token not in api.web.log()
    assert "hunter2" not in api.web.log()
