"""Named limits attacked over the HTTP API (docs/limits.md, docs/security.md): a tenant's
token tries to use, see, change or remove another tenant's key, or a cluster-wide one, and
learns nothing it may not; bad keys and rates are refused with nothing written."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.helpers.tenancy import HANDLER, allowing, assert_no_secret, count, job, tenant_token
from tests.helpers.web import Api, api_cluster

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def api(database_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Api]:
    with api_cluster(database_url, tmp_path_factory.mktemp("limit-attacks")) as running:
        with running.as_("admin") as admin:
            assert admin.put("/api/limits/warehouse", json={"max_concurrent": 2}).status_code == 200
            for tenant in ("acme", "globex"):
                made = admin.put(f"/api/limits/{tenant}-db?tenant={tenant}", json={"rate": "6/10s"})
                assert made.status_code == 200, made.text
        yield running


def test_a_tenant_cannot_use_another_tenants_key_and_learns_nothing_of_it(api: Api) -> None:
    token = tenant_token(api, "acme-user", "write", "acme")
    before = count(api, "SELECT count(*) FROM jobs")
    with allowing(api, HANDLER), api.web.client(token) as client:
        theirs = client.post("/api/jobs", json=job("spy", "acme", uses=["globex-db"]))
        nobody = client.post("/api/jobs", json=job("spy", "acme", uses=["no-such-key"]))
        assert theirs.status_code == nobody.status_code == 422, theirs.text
        # Another tenant's key reads as a key nobody has: its name tells nothing.
        assert theirs.json()["message"] == nobody.json()["message"].replace(
            "no-such-key", "globex-db"
        )
        mine = client.post("/api/jobs", json=job("mine", "acme", uses=["acme-db", "warehouse"]))
        assert mine.status_code == 201, mine.text
        assert mine.json()["uses"] == ["acme-db", "warehouse"]
        assert_no_secret(api, theirs.text, nobody.text)
    assert count(api, "SELECT count(*) FROM jobs") == before + 1


def test_a_tenant_sees_the_cluster_keys_and_its_own_only(api: Api) -> None:
    token = tenant_token(api, "acme-reader", "read", "acme")
    with api.web.client(token) as client:
        seen = client.get("/api/limits")
    assert seen.status_code == 200
    assert sorted((k["key"], k["tenant"]) for k in seen.json()) == [
        ("acme-db", "acme"),
        ("warehouse", None),
    ]
    assert "globex" not in seen.text
    with api.as_("read") as reader:  # a token of no tenant sees every key
        assert len(reader.get("/api/limits").json()) == 3


def test_a_tenant_cannot_set_or_remove_a_cluster_key_or_another_tenants(api: Api) -> None:
    token = tenant_token(api, "acme-admin", "admin", "acme")
    before = api.sql(
        "SELECT scope, name, max_concurrent, rate, per_s FROM limit_keys ORDER BY 1, 2"
    )
    with api.web.client(token) as client:
        answers = [
            client.put("/api/limits/warehouse", json={"max_concurrent": 1000}),
            client.delete("/api/limits/warehouse"),
            client.put("/api/limits/globex-db?tenant=globex", json={"rate": "1000/s"}),
            client.delete("/api/limits/globex-db?tenant=globex"),
        ]
        assert [a.status_code for a in answers] == [403, 403, 403, 403]
        # Its own key: it may change it, as only its own jobs use it.
        own = client.put("/api/limits/acme-db?tenant=acme", json={"rate": "7/10s"})
        assert own.status_code == 200 and own.json()["rate"] == "7/10s", own.text
    after = api.sql("SELECT scope, name, max_concurrent, rate, per_s FROM limit_keys ORDER BY 1, 2")
    assert [r for r in after if r[1] != "acme-db"] == [r for r in before if r[1] != "acme-db"]


def test_bad_keys_and_rates_are_refused_and_write_nothing(api: Api) -> None:
    before = api.sql(
        "SELECT scope, name, max_concurrent, rate, per_s FROM limit_keys ORDER BY 1, 2"
    )
    with api.as_("admin") as admin:
        answers = [
            admin.put("/api/limits/k", json={"rate": "0/min"}),
            admin.put("/api/limits/k", json={"rate": "often"}),
            admin.put("/api/limits/k", json={"max_concurrent": 0}),
            admin.put("/api/limits/k", json={}),
            admin.put("/api/limits/k", json={"max_concurrent": 1, "burst": 3}),
        ]
        assert [a.status_code for a in answers] == [422] * 5, [a.text for a in answers]
        # A key in use is not removed (409), nor is one nobody has (404).
        with allowing(api, HANDLER):
            made = admin.post("/api/jobs", json=job("user", "default", uses=["warehouse"]))
            assert made.status_code == 201, made.text
        assert admin.delete("/api/limits/warehouse").status_code == 409
        assert admin.delete("/api/limits/nobody").status_code == 404
        assert admin.delete("/api/jobs/default/user").status_code == 204
    after = api.sql("SELECT scope, name, max_concurrent, rate, per_s FROM limit_keys ORDER BY 1, 2")
    assert after == before
