"""A page of jobs written as JSON by its statement (``cluster/jobs/sqljson.py``) says what
``Job.to_json`` says of each job: the same keys in the same order, the same values of the
same JSON types (a float stays ``60.0``), the same nulls and nested objects, the handler
masked alike; and keyset pages keep to the token's tenant."""

from __future__ import annotations

import dataclasses
import json
from datetime import timedelta
from typing import Any

import pytest

from cluster.jobs.spec import OPTIONS, JobSpec
from cluster.store.jobstore.pages import Pages
from cluster.store.jobstore.store import JobStore
from cluster.timing.calendars import Calendar, parse_dates
from tests.helpers.masking import EXAMPLES, SECRETS
from tests.helpers.sessions import T0

H = timedelta(hours=1)
DEEP: Any = "bottom"
for _ in range(101):  # written before 0.3.0 capped the depth: shown as not_shown
    DEEP = [DEEP]

# Jobs that set every option Job carries, with values of every shape.
ENTRIES: list[dict[str, Any]] = [
    {"name": "plain", "schedule": "@every 1h", "handler": "billing.jobs:rollup"},
    {
        "name": "every-option",
        "tenant": "acme",
        "schedule": "30 9 * * 1-5",
        "handler": "shell:/usr/bin/backup --keep 2",
        "tz": "Europe/Paris",
        "payload": {"b": [1, 2.5, None, True], "a": {"é": 'x\ny"z'}, "n": 10**12},
        "catch_up": "backfill",
        "grace": "90s",
        "max_backfill": 7,
        "timeout": 1.25,
        "retries": 3,
        "retry_backoff": "0.1s",
        "dst_repeated": "twice",
        "dst_skipped": "skip",
        "keep_for": "7d",
        "keep_runs": 40,
        "output_limit": 1024,
        "late_after": "2m",
        "pause_after_failures": 4,
        "overlap": "allow",
        "max_concurrent": 3,
        "priority": 50,
        "cancel_grace": "2.5s",
        "zones": ["b", "a"],
        "jitter": "1.5s",
        "payload_schema": {"type": "object", "properties": {"n": {"type": "integer"}}},
        "labels": {"team": "ops", "tier": "1"},
        "expect_max": "10m",
        "expect_min": "0.5s",
        "deadline": "06:30",
        "expect_baseline": 2.5,
        "asserts": "rows > 0",
        "assert_fails": True,
        "description": 'Nightly backup, "quoted" and <b>marked</b>',
        "uses": ["warehouse"],
        "api_run": True,
    },
    {
        "name": "several",
        "tenant": "acme",
        "schedule": None,
        "schedules": [
            "0 * * * *",
            {"schedule": "5 */2 * * *", "payload": {"z": 1, "a": [None]}},
            {
                "schedule": "@daily",
                "start": "2026-01-02T00:00:00Z",
                "end": "2026-03-01T12:00:00.5+01:00",
            },
        ],
        "handler": "billing.jobs:rollup",
    },
    {"name": "each-zone", "schedule": "@hourly", "handler": "x.y:z", "each_zone": True},
    {"name": "each-node", "schedule": "@hourly", "handler": "x.y:z", "each_node": True},
    {
        "name": "business",
        "schedule": "0 9 * * *",
        "handler": "x.y:z",
        "calendar": "office",
        "on_excluded": "next-business-day",
        "business_day": 2,
    },
    {
        "name": "one-off",
        "schedule": "@at 2026-01-03T04:05:06Z",
        "handler": "x.y:z",
        "remove_when_done": True,
    },
    {"name": "downstream", "schedule": "@hourly", "handler": "x.y:z", "after": ["plain"]},
    {"name": "chained", "schedule": "@after:plain", "handler": "x.y:z"},
    {"name": "paused", "schedule": "@hourly", "handler": "x.y:z", "paused": True, "max_runs": 9},
    {"name": "watched", "schedule": "@hourly", "watch": True},
    {"name": "zzz-deep", "schedule": "@hourly", "handler": "x.y:z"},
]
ENTRIES += [
    {"name": f"masked-{i:02d}", "tenant": "secrets", "schedule": "@hourly", "handler": handler}
    for i, (handler, _) in enumerate(EXAMPLES)
]


async def _jobs(store: JobStore) -> None:
    """ENTRIES written, then state no definition sets: a lease, a pause note, times with
    and without microseconds, health, a window, a depth past the cap."""
    await store.calendars.put(Calendar("office", excluded=parse_dates(["2026-01-05"])), now=T0)
    await store.limits.set("warehouse", max_concurrent=2)
    specs = []
    for entry in ENTRIES:
        found = {k: v for k, v in entry.items() if v is not None}
        specs.append(JobSpec.from_mapping(found))
    await store.definitions.apply(specs, now=T0)
    await store.windows.add(T0 + H, T0 + 3 * H, job="plain", now=T0)
    await store.db.conn.execute(
        "UPDATE jobs SET status = 'running', locked_by = 'node-a', lease_token = 3,"
        " lease_expires_at = %(t)s + interval '1.000001 s', last_run_at = %(t)s,"
        " attempt = 2, failed_slots = 1, cancel_by = 'ops', runs_done = 5,"
        " last_success_at = %(t)s - interval '1 day 0.25 s', expect_state = 'slow',"
        " expect_state_at = %(t)s WHERE name = 'every-option'",
        {"t": T0},
    )
    await store.db.conn.execute(
        "UPDATE jobs SET pause_note = 'paused after 4 failures', paused_until = %(t)s"
        " WHERE name = 'paused'",
        {"t": T0 + 2 * H},
    )
    await store.db.conn.execute(  # `pulse jobs adopt`
        "UPDATE jobs SET adopt_at = %(t)s WHERE name = 'watched'", {"t": T0 + 24 * H}
    )
    await store.db.conn.execute(
        "UPDATE jobs SET payload = jsonb_build_object('deep', %(deep)s::jsonb),"
        " labels = %(deep)s::jsonb WHERE name = 'zzz-deep'",
        {"deep": json.dumps({"x": DEEP})},
    )


def _canonical(value: Any) -> str:
    """One text for a JSON value: key order, and int against float, are kept."""
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


async def test_a_page_written_by_sql_says_what_the_model_says(store: JobStore) -> None:
    await _jobs(store)
    page = await store.pages.jobs(limit=500)
    written = json.loads(page.jobs)
    models = {str(j.id): j for j in await store.jobs()}
    assert len(written) == len(models) == page.count
    for job in written:
        assert _canonical(job) == _canonical(models[job["id"]].to_json()), job["name"]
    # A scoped page, from a cursor, is the same too.
    scoped = await Pages(store.db.conn, "acme").jobs(after=("acme", "each"), limit=1)
    (every,) = json.loads(scoped.jobs)
    assert scoped.last == ("acme", "every-option")
    assert _canonical(every) == _canonical(models[every["id"]].to_json())


async def test_the_page_covers_every_option_the_model_carries(store: JobStore) -> None:
    """Every option of ``Job`` takes a value other than its default in ENTRIES, so a new
    option rendered differently by the statement fails the test above."""
    await _jobs(store)
    jobs = await store.jobs()
    for d in OPTIONS.read:
        default = d.default if d.default is not dataclasses.MISSING else None
        default = list(default) if isinstance(default, tuple) else default
        values = [getattr(j, d.name) for j in jobs]
        values = [list(v) if isinstance(v, tuple) else v for v in values]
        assert any(v != default for v in values), d.name
    states = {j.name: j for j in jobs}
    assert states["paused"].next_run_at is None and states["chained"].to_json()["slot_at"] is None
    assert states["several"].to_json()["schedules"] is not None


@pytest.mark.parametrize("handler", [h for h, _ in EXAMPLES])
async def test_no_secret_appears_in_a_page_of_jobs(store: JobStore, handler: str) -> None:
    await store.definitions.apply([JobSpec.build("masked", "@hourly", handler)], now=T0)
    page = await store.pages.jobs()
    (job,) = json.loads(page.jobs)
    assert not any(secret in page.jobs for secret in SECRETS)
    assert job["handler"] == (await store.get("masked")).to_json()["handler"]


async def test_a_scoped_page_never_reads_another_tenants_jobs(store: JobStore) -> None:
    specs = [
        JobSpec.build(name, "@hourly", "x.y:z", tenant=tenant)
        for tenant in ("acme", "globex", "initech")
        for name in ("a", "b")
    ]
    await store.definitions.apply(specs, now=T0)
    acme = Pages(store.db.conn, "acme")
    tenants = [
        {j["tenant"] for j in json.loads((await page).jobs)}
        for page in (
            acme.jobs(),
            acme.jobs(tenant="globex"),
            acme.jobs(after=("acme", "b")),  # the cursor past its own last job
            acme.jobs(after=("globex", "")),  # a cursor into another tenant
            acme.jobs(tenant="globex", after=("globex", "")),
            acme.jobs(after=("", "")),
        )
    ]
    assert tenants == [{"acme"}, set(), set(), set(), set(), {"acme"}]
    page = await acme.jobs(limit=1)
    assert page.count == 1 and page.last == ("acme", "a")
