"""``pulse audit`` after an outage longer than the records a catch-up or an apply lists:
both record the newest 1,000 slots they pass, one row each, and the oldest of those rows
stands for the slots before it (``runs.skipped_from``, migration
``0.3.0_pre_zzzz_skipped_from``), so every slot of the outage is ``skipped``, none
``missing`` (docs/design/audit.md). Driven by the node's own claim and completion
statements on an explicit clock, and by the store's apply."""

from __future__ import annotations

import asyncio
from datetime import timedelta

import pytest

from cluster.jobs.spec import JobSpec
from cluster.settings import ClusterSettings
from cluster.store.jobstore.store import JobStore
from cluster.timing import passing
from node.pipeline.outcomes import after_run, plan_at_claim
from tests.helpers.cli import audit_slots
from tests.helpers.history import rows
from tests.helpers.roles import Logins, grant_roles
from tests.helpers.sessions import ALL, OK, T0, Opener

HANDLER = "cluster.chaos.witness:record"
OUTAGE = timedelta(seconds=1500)  # 1,499 slots of a job @every 1s overdue
BACK = T0 + OUTAGE


async def created_at_t0(store: JobStore, settings: ClusterSettings, spec: JobSpec) -> None:
    await store.definitions.add(spec, now=T0)
    await rows(settings, "UPDATE job_revisions SET at = %s RETURNING 1", (T0,))


async def test_catch_up_after_a_long_outage_leaves_no_slot_missing(
    store: JobStore, settings: ClusterSettings, open_session: Opener
) -> None:
    await created_at_t0(store, settings, JobSpec.build("probe", "@every 1s", HANDLER))
    await rows(
        settings,
        "INSERT INTO alert_rules (name, url, events) VALUES ('ops', 'http://x', '{skipped}') "
        "RETURNING 1",
    )
    node = await open_session("n1", "za")
    # The cluster comes back at BACK: the node claims the job's first slot, 1,499 s late.
    now = BACK
    for _ in range(3):
        for job in (await node.claim(ALL, 10, 30.0, now=now)).jobs:
            done, skips = plan_at_claim(job, now) or after_run(job, OK, now)
            await node.completions.complete([done], skips, now=now)

    records = await rows(
        settings,
        "SELECT scheduled_for, status, skipped_from, last_error FROM runs "
        "WHERE job_name = 'probe' ORDER BY scheduled_for",
    )
    standing = [r for r in records if r["skipped_from"] is not None]
    assert len(records) < 1010  # one row per listed slot, not per slot of the outage
    # The claimed slot, T0 + 1 s, has its own row; the slots after it up to the newest
    # 1,000 listed have none.
    assert len(standing) == 1 and standing[0]["skipped_from"] == T0 + timedelta(seconds=2)
    reason = standing[0]["last_error"]
    assert "498 older slots, from 2026-01-01T00:00:02+00:00, were skipped too" in reason
    # One `skipped` alert, counting every slot the catch-up passed.
    (alert,) = await rows(settings, "SELECT detail FROM alert_events WHERE event = 'skipped'")
    assert alert["detail"].startswith("1499 slots skipped by catch-up once"), alert

    # The newest slot, BACK's, ran; every one before it is skipped.
    code, lines = await audit_slots(settings, "probe", T0, BACK + timedelta(seconds=1))
    assert code == 0 and len(lines) == 1500, [x for x in lines if x["verdict"] != "skipped"][:3]
    assert [line["verdict"] for line in lines] == ["skipped"] * 1499 + ["ran"]
    unlisted = next(
        line for line in lines if line["slot"] == (T0 + timedelta(seconds=2)).isoformat()
    )
    assert unlisted["verdict"] == "skipped"
    assert f"listed under {standing[0]['scheduled_for'].isoformat()}" in unlisted["detail"]


@pytest.mark.parametrize("login", ["owner", "web"])
async def test_an_apply_over_a_long_outage_leaves_no_slot_missing(
    store: JobStore, settings: ClusterSettings, logins: Logins, login: str
) -> None:
    """By the owner, the records are written after the apply's upsert; by the web's role,
    which writes no past runs, through record_skipped before it (cluster/store/jobstore/
    dropped.py)."""
    await created_at_t0(store, settings, JobSpec.build("probe", "@every 1s", HANDLER))
    # No node ran it; at BACK a new timing moves it past every overdue slot.
    new = [JobSpec.build("probe", "@every 7s", HANDLER)]
    if login == "web":
        await asyncio.to_thread(grant_roles, settings, logins)
        async with JobStore.open(logins.as_web(settings)) as web:
            await web.definitions.apply(new, now=BACK)
    else:
        await store.definitions.apply(new, now=BACK)

    (standing,) = await rows(
        settings,
        "SELECT scheduled_for, skipped_from FROM runs "
        "WHERE job_name = 'probe' AND skipped_from IS NOT NULL",
    )
    assert standing["skipped_from"] == T0 + timedelta(seconds=1)
    code, lines = await audit_slots(settings, "probe", T0, BACK)
    assert code == 0 and {line["verdict"] for line in lines} == {"skipped"}
    assert len(lines) == 1499


@pytest.mark.parametrize("walk, listed", [(300, 1000), (300, 100)])
async def test_an_apply_over_an_outage_longer_than_its_walk_leaves_no_slot_missing(
    store: JobStore,
    settings: ClusterSettings,
    monkeypatch: pytest.MonkeyPatch,
    walk: int,
    listed: int,
) -> None:
    """An outage of more slots than an apply walks (``MAX_OUTAGE_SLOTS``, 100,000, cut
    here to 300): the walk goes on from where it stopped, or, when the newest
    ``MAX_RECORDED`` slots lie far past it, from the clock back, so the newest slot
    passed is listed and the oldest listed stands for every one before it."""
    monkeypatch.setattr(passing, "MAX_OUTAGE_SLOTS", walk)
    monkeypatch.setattr(passing, "MAX_RECORDED", listed)
    await created_at_t0(store, settings, JobSpec.build("probe", "@every 1s", HANDLER))
    await store.definitions.apply([JobSpec.build("probe", "@every 7s", HANDLER)], now=BACK)

    records = await rows(
        settings,
        "SELECT scheduled_for, skipped_from, last_error FROM runs "
        "WHERE job_name = 'probe' ORDER BY scheduled_for",
    )
    assert len(records) == listed
    assert records[-1]["scheduled_for"] == BACK  # the newest slot passed
    standing = records[0]
    assert standing["skipped_from"] == T0 + timedelta(seconds=1)
    # 300 walked, then the newest 200 from the clock back: the count of the older ones is
    # then a lower bound.
    older = "500 older" if listed == 1000 else "more than 400 older"
    assert f"; {older} slots, from 2026-01-01T00:00:01+00:00" in standing["last_error"]
    code, lines = await audit_slots(settings, "probe", T0, BACK)
    assert code == 0 and {line["verdict"] for line in lines} == {"skipped"}
    assert len(lines) == 1499
