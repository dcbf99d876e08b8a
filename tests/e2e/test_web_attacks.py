"""Attacks on a real ``pulse web`` and real nodes, each a named test that shows it refused:
nothing written, no secret in any response, row, log or output. The list, with the threat
model, is in docs/security.md; a new attack goes in both.

Sections: handlers written over the API; secrets and egress; console sessions and sign-in;
quotas and bodies; database roles and webhooks.
"""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import pytest

from tests.helpers.cli import invoke
from tests.helpers.roles import Logins, grant_roles, refused
from tests.helpers.tenancy import (
    HANDLER,
    allowing,
    assert_no_secret,
    count,
    job,
    row_locked,
    set_quota,
    tenant_token,
    waiting_on_locks,
)
from tests.helpers.waiting import until
from tests.helpers.web import Api, api_cluster

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def api(database_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Api]:
    with api_cluster(database_url, tmp_path_factory.mktemp("attacks")) as running:
        yield running


# --- Handlers written over the API -------------------------------------------------------


# --- Secrets and egress ------------------------------------------------------------------


# --- Console sessions and sign-in --------------------------------------------------------


# --- Quotas and bodies -------------------------------------------------------------------


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
        assert_no_secret(api, refused.text, apply.text)
    assert count(api, "SELECT count(*) FROM jobs WHERE tenant_id = 'capped'") == 2


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
    day = {"from": "2031-01-01T00:00:00Z", "to": "2031-01-01T06:00:00Z"}  # 6 hourly slots
    with allowing(api, HANDLER), api.web.client(token) as client:
        assert client.post("/api/jobs", json=job("hourly", "filling")).status_code == 201
        first = client.post("/api/jobs/filling/hourly/backfill", json=day)
        assert first.status_code == 201, first.text
        refused = client.post("/api/jobs/filling/hourly/backfill", json=day)
        assert refused.status_code == 409, refused.text
        assert refused.json()["field"] == "max_backfill_slots"
        assert_no_secret(api, refused.text)
    assert count(api, "SELECT count(*) FROM backfills WHERE tenant_id = 'filling'") == 1


def test_max_parallel_past_the_tenants_cap_is_refused(api: Api) -> None:
    token = tenant_token(api, "wide-writer", "write", "narrow")
    set_quota(api, "narrow", max_parallel=2)
    window = {"from": "2031-01-01T00:00:00Z", "to": "2031-01-01T06:00:00Z", "max_parallel": 50}
    with allowing(api, HANDLER), api.web.client(token) as client:
        wide = job("wide", "narrow", overlap="allow", max_concurrent=50)
        refused = client.post("/api/jobs", json=wide)
        assert refused.status_code == 422 and refused.json()["field"] == "max_concurrent"
        assert client.post("/api/jobs", json=job("slim", "narrow")).status_code == 201
        backfill = client.post("/api/jobs/narrow/slim/backfill", json=window)
        assert backfill.status_code == 422 and backfill.json()["field"] == "max_parallel"
        assert_no_secret(api, refused.text, backfill.text)
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
        assert client.get("/api/audit?limit=100000").status_code == 422


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
            assert_no_secret(api, *(r.text for r in refused))
        answers = [c.result(timeout=30) for c in calls]
    assert sorted(a.status_code for a in answers) == [200] * 4 + [429] * 6
    paused = count(api, "SELECT count(*) FROM api_audit WHERE tenant_id = 'hogging'")
    assert paused - audited == 4  # the refused ones wrote nothing


# --- Database roles and webhooks ---------------------------------------------------------


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
        assert refused(url, schema, statement) == "InsufficientPrivilege", statement
    assert (
        count(
            api, "SELECT count(*) FROM information_schema.columns WHERE table_schema = %s", schema
        )
        == columns
    )
    assert count(api, "SELECT count(*) FROM runs") == runs


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
        answer = client.get("/api/audit?limit=1000")
        assert answer.status_code == 200
        entries = answer.json()["entries"]
    assert entries and {e["tenant"] for e in entries} == {"own"}
    assert_no_secret(api, answer.text)  # nor in any row, the CLI's included
    actions = {r[0] for r in api.sql("SELECT action FROM api_audit WHERE token_name LIKE 'cli:%%'")}
    assert {"create token", "set config", "set quota"} <= actions
    with api.as_("acme") as scoped_writer:
        assert scoped_writer.get("/api/audit").status_code == 403
