"""Job revisions from the remote paths: the HTTP API of a real ``pulse web`` (who is the
token's name, never the token; history, rollback, plans and stale plans, tenant scope) and
``--sync-jobs`` on a real node (who is the node). The local paths:
tests/integration/test_revisions.py; attacks: tests/e2e/test_web_attacks.py."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from cluster.settings import ClusterSettings
from cluster.store.jobstore.store import JobStore
from tests.helpers.nodes import Nodes
from tests.helpers.waiting import until
from tests.helpers.web import Api, api_cluster

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(120)]

HANDLER = "billing.jobs:rollup"


@pytest.fixture(scope="module")
def api(database_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Api]:
    with api_cluster(database_url, tmp_path_factory.mktemp("revisions")) as running:
        running.set_config("api.handlers", HANDLER)
        yield running


def job(name: str, **extra: Any) -> dict[str, Any]:
    return {"name": name, "schedule": "@hourly", "handler": HANDLER, **extra}


def revisions(api: Api) -> list[tuple[Any, ...]]:
    return api.sql("SELECT * FROM job_revisions ORDER BY tenant_id, job_name, revision")


def test_api_changes_write_revisions_naming_the_token(api: Api) -> None:
    with api.as_("write") as client:
        assert client.post("/api/jobs", json=job("api-job")).status_code == 201
        put = client.put("/api/jobs/default/api-job", json=job("api-job", timeout="2m"))
        assert put.status_code == 200, put.text
        assert put.json()["revision"] == 2
        assert client.post("/api/jobs/default/api-job/pause").status_code == 200
        assert client.post("/api/jobs/default/api-job/trigger").status_code == 200
        applied = client.post("/api/jobs:apply", json=[job("api-job", timeout="3m", paused=True)])
        assert applied.status_code == 200, applied.text
        found = client.get("/api/jobs/default/api-job/revisions")
    assert found.status_code == 200, found.text
    listed = found.json()["revisions"]
    assert [(r["revision"], r["who"], r["how"]) for r in listed] == [
        (4, "deployer", "api"),
        (3, "deployer", "api"),
        (2, "deployer", "api"),
        (1, "deployer", "api"),
    ]
    assert listed[0]["diff"] == {"timeout_s": [120.0, 180.0]}
    assert listed[2]["diff"] == {"timeout_s": [300.0, 120.0]}
    text = repr(revisions(api))
    assert all(secret not in text for secret in api.tokens.values())
    # The pooled connection forgets the token once the request is over.
    assert api.sql(
        "SELECT count(*) FROM job_revisions WHERE how = 'api' AND who <> 'deployer'"
    ) == [(0,)]


def test_api_rollback_and_its_bad_input(api: Api) -> None:
    with api.as_("write") as client:
        assert client.post("/api/jobs", json=job("undo", payload={"v": 1})).status_code == 201
        changed = client.put("/api/jobs/default/undo", json=job("undo", payload={"v": 2}))
        assert changed.status_code == 200
        before = revisions(api)
        for body, field in (({"to": 9}, "to"), ({"to": 0}, "to"), ({"to": "1"}, "to")):
            bad = client.post("/api/jobs/default/undo/rollback", json=body)
            assert bad.status_code == 422, bad.text
            assert bad.json()["field"] == field
        assert revisions(api) == before
        done = client.post("/api/jobs/default/undo/rollback", json={"to": 1})
        assert done.status_code == 200, done.text
        assert done.json() == {"restored": 1, "revision": 3}
        shown = client.get("/api/jobs/default/undo").json()
        assert (shown["payload"], shown["revision"]) == ({"v": 1}, 3)
    audit = api.sql("SELECT action, detail FROM api_audit WHERE job_name = 'undo' ORDER BY id")
    assert audit[-1] == ("rollback", "to revision 1")


def test_api_plan_and_a_stale_plan_is_409(api: Api) -> None:
    with api.as_("write") as client:
        assert client.post("/api/jobs", json=job("planned")).status_code == 201
        body = [job("planned", schedule="@daily")]
        plan = client.post("/api/jobs:plan", json=body)
        assert plan.status_code == 200, plan.text
        (entry,) = plan.json()["jobs"]
        assert (entry["action"], entry["revision"]) == ("update", 1)
        assert entry["changes"] == {"schedule": ["@hourly", "@daily"]}
        assert client.get("/api/jobs/default/planned").json()["schedule"] == "@hourly"
        expect = {"default/planned": entry["revision"]}
        assert client.post("/api/jobs/default/planned/pause").status_code == 200
        before = revisions(api)
        stale = client.post("/api/jobs:apply", json={"jobs": body, "expect_revisions": expect})
        assert stale.status_code == 409, stale.text
        assert stale.json()["field"] == "plan"
        assert "stale: job planned is at revision 2, the plan saw 1" in stale.json()["message"]
        assert revisions(api) == before
        bad = client.post("/api/jobs:apply", json={"jobs": body, "expect_revisions": [1]})
        assert bad.status_code == 422 and bad.json()["field"] == "expect_revisions"
        fresh = {"default/planned": 2}
        done = client.post("/api/jobs:apply", json={"jobs": body, "expect_revisions": fresh})
        assert done.status_code == 200, done.text
        assert done.json()["updated"] == ["planned"]


def test_a_tenant_token_sees_only_its_tenants_history(api: Api) -> None:
    with api.as_("write") as client:
        assert client.post("/api/jobs", json=job("secretive")).status_code == 201
    with api.as_("acme") as acme:
        assert acme.post("/api/jobs", json=job("mine")).status_code == 201
        assert acme.get("/api/jobs/acme/mine/revisions").status_code == 200
        assert acme.get("/api/jobs/default/secretive/revisions").status_code == 404
        other = acme.post("/api/jobs/default/secretive/rollback", json={"to": 1})
        assert other.status_code == 404
    with api.as_("read") as reader:
        assert reader.get("/api/jobs/default/secretive/revisions").status_code == 200
        assert (
            reader.post("/api/jobs/default/secretive/rollback", json={"to": 1}).status_code == 403
        )


# -- --sync-jobs on a real node -------------------------------------------------------------


async def _history(settings: ClusterSettings, name: str, tenant: str) -> list[tuple[str, str]]:
    async with JobStore.open(settings) as store:
        return [(r.who, r.how) for r in await store.revisions.history(name, tenant)]


def test_sync_jobs_writes_revisions_naming_the_node(
    settings: ClusterSettings, tmp_path: Path
) -> None:
    async def init() -> None:
        async with JobStore.open(settings) as store:
            await store.init(shards=16)

    asyncio.run(init())
    nodes = Nodes(settings, tmp_path)
    try:
        nodes.start("syncer", "a", "--sync-jobs", "tests.registries.billing")
        found = until(
            lambda: asyncio.run(_history(settings, "billing_rollup", "acme")),
            "the synced job's revision",
            30,
        )
        assert found == [("syncer", "sync")]
        assert asyncio.run(_history(settings, "beat", "default")) == [("syncer", "sync")]
        # A node started again with the same registry changes nothing: no revision.
        assert set(nodes.stop_all().values()) == {0}
        nodes.start("again", "a", "--sync-jobs", "tests.registries.billing")
        lines = until(
            lambda: [ln for ln in nodes.node("again").lines() if "jobs synced:" in ln],
            "the second sync",
            30,
        )
        assert "0 created, 2 unchanged" in lines[0]
        assert asyncio.run(_history(settings, "beat", "default")) == [("syncer", "sync")]
    finally:
        nodes.close()
