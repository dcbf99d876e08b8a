"""Tenants' quotas (migration 019, cluster/store/jobstore/quotas.py): the database refuses a job
past a tenant's ``max_jobs``, a backfill past its ``max_backfill_slots`` or a job or backfill asking
more slots at once than its ``max_parallel``, on every path that writes, with one line naming the
cap and nothing written; two writers racing for the last place cannot both have it; a tenant without
a quota is not capped."""

from __future__ import annotations

import asyncio
import json
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

import pytest

from cluster.errors import Conflict, InvalidInput
from cluster.jobs.spec import JobSpec
from cluster.settings import ClusterSettings
from cluster.store.jobstore.store import JobStore
from tests.helpers.cli import Invoke, add_args, assert_bad_input, jobs_rows

T0 = datetime(2031, 3, 4, 12, 0, tzinfo=UTC)
HANDLER = "cluster.chaos.witness:record"


def spec(name: str, tenant: str = "a", **options: Any) -> JobSpec:
    return JobSpec.build(name, "@hourly", HANDLER, tenant=tenant, **options)


async def count(store: JobStore, tenant: str) -> int:
    return len(await store.jobs(tenant))


async def test_a_job_past_max_jobs_is_refused_naming_the_cap(store: JobStore) -> None:
    quota = await store.quotas.set("a", {"max_jobs": 2})
    assert quota is not None and quota.describe() == "max_jobs 2"
    await store.definitions.add(spec("one"))
    await store.definitions.apply(
        [spec("two"), spec("one", timeout="1m")]
    )  # an update is no new job
    with pytest.raises(Conflict) as refused:
        await store.definitions.add(spec("three"))
    assert refused.value.field == "max_jobs"
    assert "max_jobs 2" in str(refused.value) and "\n" not in str(refused.value)
    with pytest.raises(Conflict):  # all or nothing: the first of the two is not kept
        await store.definitions.apply([spec("two"), spec("four"), spec("five")])
    assert await count(store, "a") == 2
    await store.definitions.add(spec("free", tenant="b"))  # another tenant has no cap
    await store.quotas.set("a", {"max_jobs": None})
    assert await store.quotas.quotas() == []  # no cap left: no row
    await store.definitions.add(spec("three"))


async def test_two_writers_racing_for_the_last_place_cannot_both_have_it(
    settings: ClusterSettings, store: JobStore
) -> None:
    await store.quotas.set("a", {"max_jobs": 1})

    async def add(name: str) -> str:
        async with JobStore.open(settings) as other:
            try:
                await other.definitions.add(spec(name))
            except Conflict:
                return "refused"
            return "added"

    results = await asyncio.gather(*(add(f"job-{i}") for i in range(6)))
    assert sorted(results) == ["added"] + ["refused"] * 5
    assert await count(store, "a") == 1


async def test_max_parallel_caps_a_jobs_overlap_and_a_backfill(store: JobStore) -> None:
    await store.quotas.set("a", {"max_parallel": 4, "max_backfill_slots": 30})
    with pytest.raises(InvalidInput) as refused:
        await store.definitions.add(spec("wide", overlap="allow", max_concurrent=5))
    assert refused.value.field == "max_concurrent" and "max_parallel" in refused.value.problem
    await store.definitions.add(spec("wide", overlap="allow", max_concurrent=4))
    with pytest.raises(InvalidInput):  # nor raised later by an update
        await store.definitions.apply([spec("wide", overlap="allow", max_concurrent=9)])
    assert (await store.get("wide", "a")).max_concurrent == 4
    start, end = datetime(2026, 3, 1, tzinfo=UTC), datetime(2026, 3, 2, tzinfo=UTC)  # 24 slots
    with pytest.raises(InvalidInput) as refused:
        await store.runcontrol.backfill("wide", "a", start=start, end=end, max_parallel=5, now=T0)
    assert refused.value.field == "max_parallel"
    made = await store.runcontrol.backfill(
        "wide", "a", start=start, end=end, max_parallel=4, now=T0
    )
    assert made.backfill is not None
    with pytest.raises(Conflict) as refused:  # 24 pending + 24 > 30
        await store.runcontrol.backfill("wide", "a", start=start, end=end, now=T0)
    assert refused.value.field == "max_backfill_slots"
    assert len(await store.runcontrol.backfills("a")) == 1
    await store.runcontrol.cancel_backfill(
        made.backfill.id
    )  # cancelled: its slots are no longer pending
    await store.runcontrol.backfill("wide", "a", start=start, end=end, now=T0)


async def test_a_tenants_jobs_are_capped_in_period_kept_output_and_retention(
    store: JobStore,
) -> None:
    caps = {"min_period_s": 300, "max_output_limit": 4096, "max_keep_for_s": 86400}
    quota = await store.quotas.set("a", {**caps, "max_keep_runs": 10})
    assert quota is not None and quota.to_json()["min_period_s"] == 300
    fine = {"output_limit": "4KiB", "keep_for": "1d", "keep_runs": 10}
    every_5m = JobSpec.build("ok", "*/5 * * * *", HANDLER, tenant="a", **fine)
    await store.definitions.add(every_5m, now=T0)
    refusals = [
        (JobSpec.build("fast", "* * * * *", HANDLER, tenant="a", **fine), "schedule"),
        (
            JobSpec.build("burst", ["0 3 * * *", "1 3 * * *"], HANDLER, tenant="a", **fine),
            "schedule",
        ),
        (spec("big", output_limit="8KiB", keep_for="1d", keep_runs=3), "output_limit"),
        (spec("long", output_limit="1KiB", keep_for="30d"), "keep_for"),
        (spec("many", output_limit="1KiB", keep_runs=11), "keep_runs"),
    ]
    for bad, field in refusals:
        with pytest.raises(InvalidInput) as refused:
            await store.definitions.apply([bad], now=T0)
        assert refused.value.field == field and "\n" not in str(refused.value), bad.name
    with pytest.raises(InvalidInput) as raised:  # an update past a cap, too
        await store.definitions.apply([replace(every_5m, output_limit=65536)], now=T0)
    assert raised.value.field == "output_limit"
    assert [j.name for j in await store.jobs("a")] == ["ok"]
    await store.definitions.add(JobSpec.build("free", "* * * * *", HANDLER, tenant="b"), now=T0)


async def test_bad_caps_are_refused_with_nothing_written(store: JobStore) -> None:
    for bad in ({"max_jobs": -1}, {"max_parallel": 0}, {"max_jobs": True}, {"nope": 3}, {}):
        with pytest.raises(InvalidInput):
            await store.quotas.set("a", bad)
    with pytest.raises(InvalidInput):
        await store.quotas.set("", {"max_jobs": 3})
    with pytest.raises(InvalidInput):
        await store.quotas.clear("a")
    assert await store.quotas.quotas() == []


def test_the_cli_sets_quotas_refuses_past_them_and_audits_its_changes(
    settings: ClusterSettings, initialised: Invoke
) -> None:
    quota = initialised("tenants", "quota", "acme", "--max-jobs", "1", "--max-parallel", "3")
    assert quota.exit_code == 0 and "max_jobs 1, max_parallel 3" in quota.stdout
    assert initialised(*add_args("one", "--tenant", "acme")).exit_code == 0
    assert_bad_input(initialised(*add_args("two", "--tenant", "acme")), "max_jobs")
    assert len(jobs_rows(settings)) == 1
    assert_bad_input(initialised("tenants", "quota", "acme", "--max-jobs", "lots"), "max_jobs")
    assert_bad_input(initialised("tenants", "quota", "acme"), "quota")
    listed = initialised("tenants", "quotas", "--json")
    assert json.loads(listed.stdout)[0]["max_jobs"] == 1

    token = initialised("tokens", "create", "ci", "--role", "write", "--tenant", "acme")
    secret = token.stdout.strip()
    assert initialised("config", "set", "keep_runs", "500").exit_code == 0
    assert initialised("tenants", "set", "acme", "--max-concurrent", "4").exit_code == 0
    assert initialised("tokens", "revoke", "ci").exit_code == 0
    assert initialised("tenants", "quota", "acme", "--clear").exit_code == 0
    entries = json.loads(initialised("tokens", "audit", "--json").stdout)
    assert [e["action"] for e in entries] == [
        "clear quota",
        "revoke token",
        "set limit",
        "set config",
        "create token",
        "set quota",
    ]
    assert all(e["token"].startswith("cli:") for e in entries)
    assert entries[3]["detail"] == "keep_runs = 500"
    assert secret not in json.dumps(entries) and secret not in initialised("tokens", "audit").stdout


def test_the_cli_caps_a_tenants_period_and_retention_in_durations(
    settings: ClusterSettings, initialised: Invoke
) -> None:
    args = ("tenants", "quota", "acme", "--min-period", "5m", "--max-keep-for", "7d")
    quota = initialised(*args, "--max-output-limit", "4096", "--max-keep-runs", "50")
    assert quota.exit_code == 0, quota.output
    assert "min_period_s 300" in quota.stdout and "max_keep_for_s 604800" in quota.stdout
    fast = add_args("fast", "--schedule", "* * * * *", "--tenant", "acme", "--output-limit", "1KiB")
    assert_bad_input(initialised(*fast), "schedule")
    assert jobs_rows(settings) == []
    assert_bad_input(
        initialised("tenants", "quota", "acme", "--min-period", "soon"), "min_period_s"
    )
