"""The HTTP API against a real ``pulse web`` process: every endpoint with good and bad
input, and every security rule (401, 403, tenant scope as 404, CSRF, 413, rate limiting,
the handler allow-list, audit rows, no token in the log)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest

from cluster.jobs.spec import JobSpec
from cluster.settings import ClusterSettings
from cluster.store.jobstore.store import JobStore
from cluster.web.bodies import encode_cursor
from cluster.web.tokens import csrf_token
from tests.helpers.cli import SHOW_KEYS as cli_show_keys
from tests.helpers.cli import spawn
from tests.helpers.waiting import until
from tests.helpers.web import Api, api_cluster, cookie_attributes, make_token, web_process

pytestmark = pytest.mark.e2e

SHOW_KEYS = cli_show_keys  # the keys of `pulse jobs show --json`


@pytest.fixture(scope="module")
def api(database_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Api]:
    with api_cluster(database_url, tmp_path_factory.mktemp("web")) as running:
        yield running


def job(name: str, handler: str = "billing.jobs:rollup", **extra: Any) -> dict[str, Any]:
    return {"name": name, "schedule": "@every 1h", "handler": handler, **extra}


def job_count(api: Api) -> int:
    return int(api.sql("SELECT count(*) FROM jobs")[0][0])


def test_openapi_lists_every_endpoint(api: Api) -> None:
    doc = httpx.get(f"{api.web.url}/api/openapi.json").json()
    paths = set(doc["paths"])
    for path in (
        "/api/jobs", "/api/jobs:apply", "/api/jobs/{tenant}/{name}",
        "/api/jobs/{tenant}/{name}/pause", "/api/jobs/{tenant}/{name}/resume",
        "/api/jobs/{tenant}/{name}/trigger", "/api/runs", "/api/status", "/api/schedule",
        "/api/audit", "/api/tokens/audit", "/api/tenants/limits", "/api/tenants/{tenant}/limit",
    ):  # fmt: skip
        assert path in paths


def test_a_request_without_a_valid_token_is_401(api: Api) -> None:
    with api.web.client() as anonymous:
        assert anonymous.get("/api/jobs").status_code == 401
    for bad in ("pulse_not-a-token", "Basic abc"):
        with httpx.Client(base_url=api.web.url, headers={"Authorization": bad}) as client:
            answer = client.get("/api/jobs")
            assert answer.status_code == 401
            assert bad not in answer.text


def test_a_token_without_the_role_is_403(api: Api) -> None:
    api.set_config("api.handlers", "billing.jobs:rollup")
    with api.as_("read") as reader:
        assert reader.get("/api/jobs").status_code == 200
        answer = reader.post("/api/jobs", json=job("by-reader"))
        assert answer.status_code == 403, answer.text
        assert reader.get("/api/tokens/audit").status_code == 403
    with api.as_("write") as writer:
        assert writer.get("/api/tokens/audit").status_code == 403
    with api.as_("admin") as admin:
        assert admin.get("/api/tokens/audit").status_code == 200


def test_create_read_replace_control_and_delete_a_job(api: Api) -> None:
    api.set_config("api.handlers", "billing.jobs:rollup")
    with api.as_("write") as client:
        created = client.post("/api/jobs", json=job("crud", payload={"a": 1}, tz="Europe/Paris"))
        assert created.status_code == 201, created.text
        assert set(created.json()) == SHOW_KEYS
        assert created.json()["payload"] == {"a": 1}
        assert client.post("/api/jobs", json=job("crud")).status_code == 409

        shown = client.get("/api/jobs/default/crud").json()
        assert shown["tz"] == "Europe/Paris" and len(shown["next_slots"]) == 5

        replaced = client.put("/api/jobs/default/crud", json=job("crud", timeout="5m"))
        assert replaced.status_code == 200 and replaced.json()["timeout_s"] == 300
        wrong = client.put("/api/jobs/default/crud", json=job("other"))
        assert wrong.status_code == 422 and wrong.json()["field"] == "name"
        assert client.put("/api/jobs/default/absent", json=job("absent")).status_code == 404

        paused = client.post("/api/jobs/default/crud/pause", json={"note": "maintenance"})
        assert paused.json()["status"] == "paused"
        assert paused.json()["pause_note"] == "maintenance"
        assert client.post("/api/jobs/default/crud/resume").json()["status"] == "idle"
        triggered = client.post("/api/jobs/default/crud/trigger").json()
        assert datetime.fromisoformat(triggered["next_run_at"]) <= datetime.now(UTC)
        for verb in ("pause", "resume", "trigger", "skip-next"):
            assert client.post(f"/api/jobs/default/absent/{verb}").status_code == 404
        later = (datetime.now(UTC) + timedelta(days=3)).isoformat()
        held = client.post("/api/jobs/default/crud/pause", json={"until": later}).json()
        assert held["status"] == "idle" and held["paused_until"] == later
        assert datetime.fromisoformat(held["next_run_at"]) >= datetime.fromisoformat(later)
        slot = client.post("/api/jobs/default/crud/resume").json()["next_slots"][0]
        skipped = client.post("/api/jobs/default/crud/skip-next", json={"count": 2}).json()
        assert slot not in skipped["next_slots"]
        assert client.post("/api/jobs/default/crud/skip-next", json={"count": 0}).status_code == 422

        assert client.delete("/api/jobs/default/crud").status_code == 204
        assert client.get("/api/jobs/default/crud").status_code == 404
        assert client.delete("/api/jobs/default/crud").status_code == 404


@pytest.mark.parametrize(
    ("body", "field"),
    [
        (job("bad-schedule", schedule="61 * * * *"), "schedule"),
        (job("bad-tz", tz="Mars/Olympus"), "tz"),
        (job("bad-payload", payload=[1, 2]), "payload"),
        (job("bad-key", colour="red"), "colour"),
        (job("bad-timeout", timeout="-5s"), "timeout"),
        ({"schedule": "@hourly", "handler": "billing.jobs:x"}, "name"),
        (job("bad-handler", handler="not a handler"), "handler"),
        (job("bad-each-node", each_node=True, overlap="allow"), "each_node"),
        (job("bad-each-node-zones", each_node=True, zones="a,,b"), "zones"),
        ([1, 2], "body"),
    ],
)
def test_bad_input_is_422_with_the_field_and_nothing_is_written(
    api: Api, body: Any, field: str
) -> None:
    api.set_config("api.handlers", "billing.jobs:rollup")
    before = job_count(api)
    with api.as_("write") as client:
        answer = client.post("/api/jobs", json=body)
    assert answer.status_code == 422, answer.text
    assert answer.json()["field"] == field and answer.json()["message"]
    assert job_count(api) == before


def test_a_body_that_is_not_json_is_422(api: Api) -> None:
    with api.as_("write") as client:
        answer = client.post("/api/jobs", content=b"{not json")
        typed = client.post("/api/jobs", content=b"{}", headers={"content-type": "text/plain"})
    assert answer.status_code == 422 and answer.json()["field"] == "body"
    assert typed.status_code == 422 and typed.json()["field"] == "content-type"


def test_a_body_over_one_mib_is_413(api: Api) -> None:
    big = job("big", payload={"blob": "x" * (1024 * 1024)})
    with api.as_("write") as client:
        assert client.post("/api/jobs", json=big).status_code == 413

        def chunks() -> Iterator[bytes]:  # no Content-Length: counted as it arrives
            for _ in range(17):
                yield b" " * 65536

        assert client.post("/api/jobs", content=chunks()).status_code == 413
    assert api.sql("SELECT count(*) FROM jobs WHERE name = 'big'")[0][0] == 0


def test_apply_is_all_or_nothing(api: Api) -> None:
    api.set_config("api.handlers", "billing.jobs:rollup")
    entries = [job("apply-1"), job("apply-2", schedule="nonsense")]
    with api.as_("write") as client:
        answer = client.post("/api/jobs:apply", json=entries)
        assert answer.status_code == 422 and "entry 2" in answer.json()["message"]
        assert api.sql("SELECT count(*) FROM jobs WHERE name LIKE 'apply-%%'")[0][0] == 0
        entries[1]["schedule"] = "@daily"
        applied = client.post("/api/jobs:apply", json={"jobs": entries}).json()
        assert applied["created"] == ["apply-1", "apply-2"]
        again = client.post("/api/jobs:apply", json=entries).json()
        assert again["unchanged"] == ["apply-1", "apply-2"]
        refused = client.post("/api/jobs:apply", json=[job("apply-3", handler="other.x:y")])
        assert refused.status_code == 403 and refused.json()["field"] == "entry 1: handler"


def test_the_handler_allow_list(api: Api) -> None:
    with api.as_("admin") as client:
        api.set_config("api.handlers", "")
        answer = client.post("/api/jobs", json=job("al-empty"))
        assert answer.status_code == 403 and answer.json()["field"] == "handler"

        api.set_config("api.handlers", "reports.jobs:daily,anything.here:run")
        assert client.post("/api/jobs", json=job("al-any", "anything.here:run")).status_code == 201
        shell = client.post("/api/jobs", json=job("al-shell", "shell:echo hi"))
        assert shell.status_code == 403, "a Python entry never allows shell: handlers"

        api.set_config("api.handlers", "reports.jobs:daily,shell:echo *")
        made = client.post("/api/jobs", json=job("al-shell", "shell:echo hi"))
        assert made.status_code == 201
        assert made.json()["handler"] == 'shell:{"argv":["echo","hi"]}', "stored as argv"
        assert client.post("/api/jobs", json=job("al-rm", "shell:rm -rf /")).status_code == 403
        # Reads and controls need no allow-list entry.
        assert client.post("/api/jobs/default/al-any/pause").status_code == 200
        changed = client.put("/api/jobs/default/al-any", json=job("al-any", "anything.here:run"))
        assert changed.status_code == 403


def test_a_tenant_scoped_token_reaches_only_its_tenant(api: Api) -> None:
    api.set_config("api.handlers", "billing.jobs:rollup")
    with api.as_("admin") as admin:
        admin.post("/api/jobs", json=job("theirs", tenant="globex"))
    with api.as_("acme") as acme:
        mine = acme.post("/api/jobs", json=job("mine"))
        assert mine.status_code == 201 and mine.json()["tenant"] == "acme"
        assert acme.post("/api/jobs", json=job("x", tenant="globex")).status_code == 403
        assert acme.get("/api/jobs/globex/theirs").status_code == 404
        for verb in ("pause", "resume", "trigger"):
            assert acme.post(f"/api/jobs/globex/theirs/{verb}").status_code == 404
        assert acme.delete("/api/jobs/globex/theirs").status_code == 404
        put = acme.put("/api/jobs/globex/theirs", json=job("theirs"))
        assert put.status_code in (403, 404)
        listed = acme.get("/api/jobs", params={"tenant": "globex"}).json()["jobs"]
        assert listed == []
        assert {j["tenant"] for j in acme.get("/api/jobs").json()["jobs"]} == {"acme"}
        assert acme.get("/api/runs", params={"tenant": "globex"}).json()["runs"] == []
        assert acme.get("/api/status").status_code == 403
    with api.as_("admin") as admin:
        assert admin.get("/api/jobs/globex/theirs").json()["status"] == "idle"


def every_page(
    client: httpx.Client, path: str, key: str, params: dict[str, Any]
) -> list[dict[str, Any]]:
    """The items under ``key`` of every page of ``path``, following ``next_cursor`` from the
    first page to the last."""
    items: list[dict[str, Any]] = []
    cursor = None
    while True:
        page = client.get(path, params={**params, "cursor": cursor} if cursor else params).json()
        items += page[key]
        cursor = page["next_cursor"]
        if cursor is None:
            return items


def test_jobs_are_listed_a_page_at_a_time_with_filters(api: Api) -> None:
    api.set_config("api.handlers", "billing.jobs:rollup")
    with api.as_("write") as client:
        for i in range(5):
            client.post("/api/jobs", json=job(f"page-{i}", tenant="paging"))
        client.post("/api/jobs/paging/page-3/pause")
        pages = every_page(client, "/api/jobs", "jobs", {"tenant": "paging", "limit": 2})
        names = [j["name"] for j in pages]
        assert names == [f"page-{i}" for i in range(5)]
        paused = client.get("/api/jobs", params={"tenant": "paging", "status": "paused"})
        assert [j["name"] for j in paused.json()["jobs"]] == ["page-3"]
        found = client.get("/api/jobs", params={"q": "PAGE-4"}).json()["jobs"]
        assert [j["name"] for j in found] == ["page-4"]
        for params in ({"status": "sleepy"}, {"cursor": "%%%"}, {"limit": 0}):
            answer = client.get("/api/jobs", params=params)
            assert answer.status_code == 422, params


def test_runs_are_listed_a_page_at_a_time_with_filters(api: Api) -> None:
    api.set_config("api.handlers", "billing.jobs:rollup")
    with api.as_("write") as client:
        created = client.post("/api/jobs", json=job("runner", tenant="runs")).json()
    base = datetime(2026, 1, 1, tzinfo=UTC)
    for i in range(5):
        api.sql(
            "INSERT INTO runs (job_id, tenant_id, job_name, scheduled_for, status) "
            "VALUES (%s, 'runs', 'runner', %s, %s)",
            (created["id"], base + timedelta(minutes=i), "failed" if i == 2 else "succeeded"),
        )
    with api.as_("read") as client:
        pages = every_page(
            client, "/api/runs", "runs", {"job": "runner", "tenant": "runs", "limit": 2}
        )
        seen = [r["scheduled_for"] for r in pages]
        assert seen == [(base + timedelta(minutes=i)).isoformat() for i in range(4, -1, -1)]
        failed = client.get("/api/runs", params={"job": "runner", "status": "failed"}).json()
        assert [r["status"] for r in failed["runs"]] == ["failed"]
        since = (base + timedelta(minutes=3)).isoformat()
        recent = client.get("/api/runs", params={"job": "runner", "since": since}).json()
        assert len(recent["runs"]) == 2
        for params in ({"since": "yesterday"}, {"status": "great"}, {"cursor": "eA"}):
            assert client.get("/api/runs", params=params).status_code == 422, params

    # An attempt in flight (as a claim leaves its job row) is listed first, as running.
    api.sql(
        "UPDATE jobs SET status = 'running', slot_at = %s, next_run_at = now(), "
        "locked_by = 'node-x', locked_at = now() WHERE name = 'runner'",
        (base + timedelta(minutes=10),),
    )
    with api.as_("read") as client:
        for params in ({"job": "runner"}, {"job": "runner", "tenant": "runs"}, {}):
            first = client.get("/api/runs", params={**params, "limit": 1}).json()["runs"][0]
            assert (first["job"], first["status"], first["node_id"]) == (
                "runner",
                "running",
                "node-x",
            ), params


def test_the_slot_ledger_is_audited_as_json_lines(api: Api) -> None:
    """GET /api/audit: a line per slot of the range, the last N with ``last``, then the
    summary; bad times are 422 naming the field."""
    api.set_config("api.handlers", "billing.jobs:rollup")
    with api.as_("write") as client:
        made = client.post("/api/jobs", json=job("ledgered", tenant="ledger", schedule="@every 1m"))
        assert made.status_code == 201, made.text
    base = datetime(2026, 1, 1, tzinfo=UTC)
    api.sql("UPDATE job_revisions SET at = %s WHERE job_name = 'ledgered'", (base,))
    # Its runs of January are kept (else the audit would call slot 3 pruned, not missing).
    api.sql("UPDATE jobs SET keep_for_s = %s WHERE name = 'ledgered'", (36500 * 86400.0,))
    for i in (1, 2, 4):
        api.sql(
            "INSERT INTO runs (job_id, tenant_id, job_name, scheduled_for, status, node_id, "
            "lease_token) VALUES (%s, 'ledger', 'ledgered', %s, 'succeeded', 'n1', %s)",
            (made.json()["id"], base + timedelta(minutes=i), i),
        )
    span = {"from": base.isoformat(), "to": (base + timedelta(minutes=5)).isoformat()}
    with api.as_("read") as client:
        answer = client.get("/api/audit", params={**span, "job": "ledgered"})
        assert answer.status_code == 200
        assert answer.headers["content-type"].startswith("application/x-ndjson")
        lines = [json.loads(line) for line in answer.text.splitlines()]
        assert [(x["slot"], x["verdict"]) for x in lines[:-1]] == [
            ((base + timedelta(minutes=i)).isoformat(), "missing" if i == 3 else "ran")
            for i in range(1, 5)
        ]
        assert lines[1]["token"] == 2 and lines[1]["node"] == "n1"
        summary = lines[-1]
        assert summary["type"] == "summary" and not summary["truncated"]
        assert summary["total"]["ran"] == 3 and summary["total"]["missing"] == 1
        tail = client.get("/api/audit", params={**span, "job": "ledgered", "last": 2}).text
        assert [json.loads(x).get("verdict") for x in tail.splitlines()] == ["missing", "ran", None]
        for params, field in (
            ({**span, "from": "yesterday"}, "from"),
            ({**span, "to": span["from"]}, "to"),
            ({"to": span["to"]}, "from"),
            ({**span, "last": 0}, "last"),
        ):
            refused = client.get("/api/audit", params=params)
            assert refused.status_code == 422, params
            assert refused.json()["field"] == field, refused.json()


def test_status_and_schedule(api: Api) -> None:
    with api.as_("read") as client:
        status = client.get("/api/status").json()
        assert status["shard_count"] == 16 and "members" in status and "healthy" in status
        slots = client.get(
            "/api/schedule", params={"expr": "0 9 * * *", "tz": "Europe/Paris", "count": 3}
        ).json()
        assert len(slots["slots"]) == 3 and slots["slots"][0].endswith(("+01:00", "+02:00"))
        assert len(slots["slots_utc"]) == 3
        bad = client.get("/api/schedule", params={"expr": "0 25 * * *"})
        assert bad.status_code == 422 and bad.json()["field"] == "schedule"
        assert (
            client.get("/api/schedule", params={"expr": "@daily", "tz": "Nowhere"}).json()["field"]
            == "tz"
        )
        assert client.get("/api/lag").status_code == 200


def test_a_console_session_needs_the_csrf_token_to_change_anything(api: Api) -> None:
    api.set_config("api.handlers", "billing.jobs:rollup")
    with api.as_("write") as client:
        client.post("/api/jobs", json=job("csrf"))
    secret = api.tokens["write"]
    with httpx.Client(base_url=api.web.url) as browser:
        form = browser.post("/console/session", data={"token": secret})
        assert form.status_code == 415, "a cross-site form cannot sign in"
        signed = browser.post("/console/session", json={"token": secret})
        assert signed.status_code == 200 and secret not in signed.text
        cookie = cookie_attributes(signed)
        assert "httponly" in cookie and "secure" not in cookie
        assert "samesite=strict" in signed.headers["set-cookie"].lower()
        csrf = signed.json()["csrf"]
        session_id = browser.cookies["pulse_session"]
        assert session_id != secret and csrf == csrf_token(session_id) != csrf_token(secret)
        assert browser.get("/api/jobs/default/csrf").status_code == 200
        refused = browser.post("/api/jobs/default/csrf/pause")
        assert refused.status_code == 403 and "CSRF" in refused.json()["message"]
        wrong = browser.post("/api/jobs/default/csrf/pause", headers={"X-CSRF-Token": "0" * 64})
        assert wrong.status_code == 403
        ok = browser.post("/api/jobs/default/csrf/pause", headers={"X-CSRF-Token": csrf})
        assert ok.status_code == 200 and ok.json()["status"] == "paused"
        assert browser.get("/console/session").json()["name"] == "deployer"
        assert browser.delete("/console/session").status_code == 403, "sign-out needs it too"
        out = browser.delete("/console/session", headers={"X-CSRF-Token": csrf})
        assert out.status_code == 204 and "pulse_session" not in browser.cookies
        assert browser.get("/api/jobs").status_code == 401
    with httpx.Client(base_url=api.web.url) as tls:
        behind = tls.post(
            "/console/session", json={"token": secret}, headers={"X-Forwarded-Proto": "https"}
        )
        assert "secure" in cookie_attributes(behind)
        assert behind.headers["strict-transport-security"] == "max-age=31536000"
        assert "strict-transport-security" not in tls.get("/api/health").headers


def test_a_revoked_token_ends_its_console_session(api: Api) -> None:
    secret = make_token(api.settings, "short-lived", "read")
    with httpx.Client(base_url=api.web.url) as browser:
        assert browser.post("/console/session", json={"token": secret}).status_code == 200
        assert browser.get("/api/jobs").status_code == 200

        async def revoke() -> None:
            async with JobStore.open(api.settings) as store:
                await store.access.revoke_token("short-lived")

        asyncio.run(revoke())
        ended = browser.get("/console/session")
        assert ended.status_code == 401
        assert "max-age=0" in ended.headers["set-cookie"].lower(), "the stale cookie is cleared"
        assert "pulse_session" not in browser.cookies


def test_every_change_leaves_an_audit_row(api: Api) -> None:
    api.set_config("api.handlers", "billing.jobs:rollup")
    with api.as_("write") as client:
        client.post("/api/jobs", json=job("audited", tenant="audit"))
        client.post("/api/jobs/audit/audited/pause", json={"note": "why"})
        client.post("/api/jobs/audit/audited/resume")
        client.post("/api/jobs/audit/audited/trigger")
        client.put("/api/jobs/audit/audited", json=job("audited", schedule="@daily"))
        client.delete("/api/jobs/audit/audited")
        client.post("/api/jobs/audit/absent/pause")  # refused: no row
    with api.as_("admin") as admin:
        entries = admin.get("/api/tokens/audit", params={"limit": 1000}).json()["entries"]
    mine = [e for e in entries if e["tenant"] == "audit"]
    assert [e["action"] for e in reversed(mine)] == [
        "create", "pause", "resume", "trigger", "update", "delete",
    ]  # fmt: skip
    assert {(e["token"], e["job"], e["source"]) for e in mine} == {
        ("deployer", "audited", "127.0.0.1")
    }
    cli = spawn(api.settings, "tokens", "audit", "--tenant", "audit", "--json").result()
    assert cli.returncode == 0, cli.stderr
    assert [e["action"] for e in json.loads(cli.stdout)] == [e["action"] for e in mine]


def test_zz_no_token_appears_in_the_log(api: Api) -> None:
    """Last in this module: the log of this worker's web holds every request the tests
    above made here (the suite spreads a module's tests over its workers), and this test's
    own, a read and a write with every token."""
    for who, secret in api.tokens.items():
        with api.web.client(secret) as client:
            client.get("/api/jobs")
            client.post("/api/jobs", json={"name": f"log-{who}", "schedule": "not a schedule"})
    written = len(api.tokens)  # the access log's lines may follow the answers
    log = until(lambda: (t := api.web.log()).count("POST /api/jobs") >= written and t, "log")
    for secret in api.tokens.values():
        assert secret not in log
        assert csrf_token(secret) not in log


def test_failed_authentications_are_rate_limited_per_address_not_valid_tokens(
    settings: ClusterSettings, tmp_path: Path
) -> None:
    async def init() -> None:
        async with JobStore.open(settings) as store:
            await store.init(16)

    asyncio.run(init())
    good = make_token(settings, "good", "read")
    with web_process(settings, tmp_path, "--auth-failures", "3", "--auth-window", "1h") as web:
        with web.client() as anonymous:  # no token presented: not a guess, not counted
            assert [anonymous.get("/api/jobs").status_code for _ in range(5)] == [401] * 5
        with web.client("pulse_wrong") as bad:
            assert [bad.get("/api/jobs").status_code for _ in range(3)] == [401] * 3
            limited = bad.get("/api/jobs")
            assert limited.status_code == 429 and int(limited.headers["retry-after"]) > 0
        with web.client(good) as client:  # only failures are refused, never a valid token
            assert client.get("/api/jobs").status_code == 200
        with httpx.Client(base_url=web.url) as browser:
            assert browser.post("/console/session", json={"token": good}).status_code == 200
        with web.client("pulse_other") as bad:
            assert bad.get("/api/jobs").status_code == 429, "the address is refused"


def test_pulse_web_without_the_extra_fails_in_one_line(tmp_path: Path) -> None:
    fake = tmp_path / "fastapi"
    fake.mkdir()
    (fake / "__init__.py").write_text("raise ImportError('No module named fastapi')\n")
    done = spawn({"PYTHONPATH": str(tmp_path)}, "web", "--bind", "127.0.0.1:1").result()
    assert done.returncode == 1
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "pulsecron[web]" in lines[0], done.stderr


def test_cancel_asks_for_the_running_slot_and_is_scoped_and_audited(api: Api) -> None:
    api.set_config("api.handlers", "billing.jobs:rollup")
    with api.as_("write") as client:
        client.post("/api/jobs", json=job("long", tenant="acme"))
        client.post("/api/jobs", json=job("long", tenant="globex"))
        assert client.post("/api/jobs/acme/long/cancel").status_code == 409  # nothing runs
        # As a claim leaves a job: running under a node's lease.
        api.sql(
            "UPDATE jobs SET status = 'running', locked_by = 'n1', lease_token = lease_token + 1"
            " WHERE name = 'long' RETURNING id"
        )
        assert client.post("/api/jobs/acme/long/cancel", json={"all": 1}).status_code == 422
        assert client.post("/api/jobs/acme/long/cancel", json={"slot": "soon"}).status_code == 422
        asked = client.post("/api/jobs/acme/long/cancel")
        assert asked.status_code == 200, asked.text
        assert [a["node_id"] for a in asked.json()] == ["n1"]
    with api.as_("acme") as acme:
        assert acme.post("/api/jobs/globex/long/cancel").status_code == 404
    requested = api.sql("SELECT tenant_id, cancel_by FROM jobs WHERE name = 'long' ORDER BY 1")
    assert requested == [("acme", "token deployer"), ("globex", None)]
    actions = api.sql("SELECT action, tenant_id, job_name FROM api_audit WHERE action = 'cancel'")
    assert actions == [("cancel", "acme", "long")]


def test_backfills_are_made_listed_and_cancelled_within_the_tokens_tenant(api: Api) -> None:
    api.set_config("api.handlers", "billing.jobs:rollup")
    span = {"from": "2026-01-01T00:00:00Z", "to": "2026-01-01T05:00:00Z"}
    with api.as_("write") as client:
        for tenant in ("acme", "globex"):
            client.post("/api/jobs", json=job("hourly", tenant=tenant, schedule="@hourly"))
        dry = client.post("/api/jobs/acme/hourly/backfill", json={**span, "dry_run": True})
        assert dry.status_code == 201 and dry.json()["dry_run"] and len(dry.json()["slots"]) == 5
        assert not api.sql("SELECT 1 FROM backfills")
        for bad, field in (
            ({**span, "to": "2025-01-01T00:00:00Z"}, "to"),
            ({"from": "yesterday", "to": span["to"]}, "from"),
            ({**span, "max_parallel": 0}, "max_parallel"),
            ({**span, "colour": "red"}, "colour"),
        ):
            answer = client.post("/api/jobs/acme/hourly/backfill", json=bad)
            assert answer.status_code == 422 and answer.json()["field"] == field, answer.text
        made = client.post("/api/jobs/globex/hourly/backfill", json={**span, "max_parallel": 2})
        assert made.status_code == 201 and made.json()["slots_total"] == 5
        other = made.json()["id"]
    with api.as_("acme") as acme:
        assert acme.post("/api/jobs/globex/hourly/backfill", json=span).status_code == 404
        mine = acme.post("/api/jobs/acme/hourly/backfill", json=span).json()
        assert [b["id"] for b in acme.get("/api/backfills").json()] == [mine["id"]]
        assert acme.post(f"/api/backfills/{other}/cancel").status_code == 404
        assert acme.post(f"/api/backfills/{mine['id']}/cancel").json()["status"] == "cancelled"
    actions = api.sql("SELECT action FROM api_audit WHERE action LIKE '%%backfill%%' ORDER BY id")
    assert [a for (a,) in actions] == ["backfill", "backfill", "cancel backfill"]


def test_alert_rules_and_deliveries_are_read_by_admins_only(api: Api) -> None:
    with api.as_("write") as client:
        assert client.get("/api/alerts").status_code == 403
    with api.as_("admin") as client:
        assert client.get("/api/alerts").json() == []
        assert client.get("/api/alerts/deliveries").json() == []
        assert client.get("/api/alerts/deliveries?status=lost").status_code == 422
        assert client.post("/api/alerts", json={"name": "x"}).status_code in (404, 405)


def test_tenant_limits_are_set_by_admins_read_in_scope_and_audited(api: Api) -> None:
    path = "/api/tenants/limited/limit"
    for who in ("read", "write", "acme"):
        with api.as_(who) as client:
            assert client.put(path, json={"max_concurrent": 3}).status_code == 403
            assert client.delete(path).status_code == 403
    with api.as_("admin") as admin:
        for bad, field in (
            ({"max_concurrent": 0}, "max_concurrent"),
            ({"max_concurrent": 1_000_001}, "max_concurrent"),
            ({"max_concurrent": "3"}, "max_concurrent"),
            ({"max_concurrent": True}, "max_concurrent"),
            ({}, "max_concurrent"),
            ({"max_concurrent": 3, "colour": "red"}, "colour"),
            ([3], "body"),
        ):
            answer = admin.put(path, json=bad)
            assert answer.status_code == 422 and answer.json()["field"] == field, answer.text
            assert "\n" not in answer.json()["message"]
        assert admin.get("/api/tenants/limits").json() == []
        made = admin.put(path, json={"max_concurrent": 3})
        assert made.status_code == 200, made.text
        assert {k: v for k, v in made.json().items() if k != "updated_at"} == {
            "tenant": "limited", "max_concurrent": 3, "running": 0,
        }  # fmt: skip
        assert admin.put("/api/tenants/acme/limit", json={"max_concurrent": 5}).status_code == 200
        listed = admin.get("/api/tenants/limits").json()
        assert [(x["tenant"], x["max_concurrent"]) for x in listed] == [("acme", 5), ("limited", 3)]
    cli = spawn(api.settings, "tenants", "list", "--json").result()
    assert cli.returncode == 0, cli.stderr
    assert json.loads(cli.stdout) == listed
    with api.as_("acme") as acme:  # a scoped token reads its tenant's limit only
        assert [x["tenant"] for x in acme.get("/api/tenants/limits").json()] == ["acme"]
    acme_admin = make_token(api.settings, "acme-admin", "admin", tenant="acme")
    with api.web.client(acme_admin) as scoped:  # a tenant's admin cannot lift its own cap
        assert scoped.put(path, json={"max_concurrent": 9}).status_code == 403
        assert scoped.put("/api/tenants/acme/limit", json={"max_concurrent": 99}).status_code == 403
        assert scoped.delete("/api/tenants/acme/limit").status_code == 403
        assert [x["max_concurrent"] for x in scoped.get("/api/tenants/limits").json()] == [5]
    with api.as_("admin") as admin:
        assert admin.delete("/api/tenants/acme/limit").status_code == 204
        assert admin.delete(path).status_code == 204
        missing = admin.delete(path)
        assert missing.status_code == 404 and "has no limit" in missing.json()["message"]
        assert admin.get("/api/tenants/limits").json() == []
    audited = api.sql(
        "SELECT token_name, action, tenant_id, job_name, detail FROM api_audit"
        " WHERE action LIKE '%%limit' ORDER BY id"
    )
    assert audited == [
        ("ops", "set limit", "limited", None, "max_concurrent 3"),
        ("ops", "set limit", "acme", None, "max_concurrent 5"),
        ("ops", "clear limit", "acme", None, None),
        ("ops", "clear limit", "limited", None, None),
    ]


def test_schedules_max_runs_and_labels_over_the_api(api: Api) -> None:
    api.set_config("api.handlers", "billing.jobs:rollup")
    body = {
        "name": "several",
        "handler": "billing.jobs:rollup",
        "labels": {"team": "api-labels"},
        "max_runs": 5,
        "schedules": ["0 9 * * *", {"schedule": "0 18 * * *", "payload": {"part": "pm"}}],
    }
    with api.as_("write") as client:
        created = client.post("/api/jobs", json=body)
        assert created.status_code == 201, created.text
        made = created.json()
        assert made["labels"] == {"team": "api-labels"} and made["max_runs"] == 5
        assert set(made["next_entries"]) == {1, 2}
        listed = client.get("/api/jobs", params={"label": "team=api-labels"}).json()["jobs"]
        assert [j["name"] for j in listed] == ["several"]
        before = job_count(api)
        twin = {"schedule": "0 9 * * *", "payload": {"x": 1}}
        clash = {**body, "name": "clash", "schedules": ["0 9 * * *", twin]}
        refused = client.post("/api/jobs", json=clash)
        assert refused.status_code == 422 and refused.json()["field"] == "schedules"
        assert "both have the slot" in refused.json()["message"]
        bad = client.post("/api/jobs", json={**body, "name": "bad", "labels": {"a b": "x"}})
        assert bad.status_code == 422 and bad.json()["field"] == "labels"
        assert client.get("/api/jobs", params={"label": "nokey"}).status_code == 422
        assert job_count(api) == before


def test_a_scoped_token_reads_no_other_tenants_jobs_through_a_page_or_a_cursor(
    api: Api,
) -> None:
    """The page's statement keeps the scope: a tenant named in the query, or a cursor made
    to point into another tenant, finds nothing of it."""
    api.set_config("api.handlers", "billing.jobs:rollup")
    with api.as_("admin") as admin:
        for tenant in ("acme", "globex", "zeta"):
            for name in ("cur-a", "cur-b"):
                admin.post("/api/jobs", json=job(name, tenant=tenant))
    with api.as_("acme") as acme:
        for params in (
            {"tenant": "globex"},
            {"cursor": encode_cursor("globex", "")},
            {"cursor": encode_cursor("acme", "\uffff")},
            {"tenant": "globex", "cursor": encode_cursor("globex", "")},
            {"cursor": encode_cursor("", ""), "limit": 500},
        ):
            answer = acme.get("/api/jobs", params=params)
            assert answer.status_code == 200, params
            assert {j["tenant"] for j in answer.json()["jobs"]} <= {"acme"}, params
            assert "globex" not in answer.text and "zeta" not in answer.text
        pages = every_page(acme, "/api/jobs", "jobs", {"limit": 1})
        assert {j["tenant"] for j in pages} == {"acme"} and len(pages) >= 2


def test_no_literal_secret_of_a_handler_appears_in_a_page_of_jobs(api: Api) -> None:
    """A handler written with literal credentials (by the CLI, which may) is listed masked,
    as the single job's answer shows it."""
    handlers = {
        "url": "shell:/usr/bin/pg_dump postgresql://app:dbpass-456@db/app",
        "env": "shell:PGPASSWORD=hunter2 /usr/bin/psql",
        "header": 'http:{"headers":{"Authorization":"Bearer literal-secret-123"},"url":"https://h"}',
    }
    specs = [
        JobSpec.build(f"secret-{k}", "@hourly", h, tenant="vault") for k, h in handlers.items()
    ]

    async def add() -> None:
        async with JobStore.open(api.settings) as store:
            await store.definitions.apply(specs)

    asyncio.run(add())
    with api.as_("read") as client:
        page = client.get("/api/jobs", params={"tenant": "vault"})
        assert page.status_code == 200
        for secret in ("dbpass-456", "hunter2", "literal-secret-123"):
            assert secret not in page.text
        listed = page.json()["jobs"]
        assert len(listed) == 3 and all("***" in j["handler"] for j in listed)
        for found in listed:
            one = client.get(f"/api/jobs/vault/{found['name']}").json()
            assert {k: one[k] for k in found} == found


def test_the_openapi_document_describes_a_page_of_jobs(api: Api) -> None:
    doc = httpx.get(f"{api.web.url}/api/openapi.json").json()
    answer = doc["paths"]["/api/jobs"]["get"]["responses"]["200"]["content"]
    ref = answer["application/json"]["schema"]["$ref"].rsplit("/", 1)[1]
    assert set(doc["components"]["schemas"][ref]["properties"]) == {"jobs", "next_cursor"}
