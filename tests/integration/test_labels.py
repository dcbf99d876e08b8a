"""Job labels and blackout windows by label against a real Postgres: labels stored and
listed (``jobs list --label``, the store, the API's page), a window by label re-plans the
jobs with that label (of one tenant or of every tenant) and only them, a job labelled
later plans with the window, and bad labels are refused with nothing written."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from cluster.errors import InvalidInput
from cluster.jobs.spec import JobSpec
from cluster.settings import ClusterSettings
from cluster.store.jobstore.store import JobStore
from node.handlers.context import Outcome
from node.pipeline.outcomes import after_run
from tests.helpers.cli import Invoke, assert_bad_input, jobs_rows
from tests.helpers.sessions import Opener

ALL = range(16)
T0 = datetime(2031, 6, 2, 10, 30, tzinfo=UTC)
H = timedelta(hours=1)
ELEVEN = datetime(2031, 6, 2, 11, 0, tzinfo=UTC)


def hourly(name: str, tenant: str = "default", **options: Any) -> JobSpec:
    return JobSpec.build(name, "0 * * * *", "shell:true", tenant=tenant, **options)


async def test_labels_are_stored_and_filter_the_list(store: JobStore) -> None:
    await store.definitions.apply(
        [
            hourly("a", labels={"team": "billing", "tier": "1"}),
            hourly("b", labels=["team=billing"]),
            hourly("c", labels="team=ops"),
            hourly("d", tenant="other", labels={"team": "billing"}),
        ],
        now=T0,
    )
    assert (await store.get("a")).labels == {"team": "billing", "tier": "1"}
    billing = await store.jobs(labels={"team": "billing"})
    assert [(j.tenant, j.name) for j in billing] == [("default", "a"), ("default", "b"),
                                                     ("other", "d")]  # fmt: skip
    assert [j.name for j in await store.jobs("default", {"team": "billing", "tier": "1"})] == ["a"]
    page = await store.pages.jobs(labels={"team": "ops"})
    assert [j["name"] for j in json.loads(page.jobs)] == ["c"]
    # Changing only the labels is a change; the same labels again are not.
    assert (
        await store.definitions.apply([hourly("c", labels="team=billing")], now=T0)
    ).updated == ["c"]
    assert (
        await store.definitions.apply([hourly("c", labels="team=billing")], now=T0)
    ).unchanged == ["c"]


async def test_a_window_by_label_covers_only_the_jobs_with_it(
    store: JobStore, open_session: Opener
) -> None:
    await store.definitions.apply(
        [
            hourly("a", labels={"team": "billing"}),
            hourly("b", labels={"team": "ops"}),
            hourly("x", tenant="other", labels={"team": "billing"}),
        ],
        now=T0,
    )
    everywhere = await store.windows.add(ELEVEN, ELEVEN + 2 * H, label=("team", "billing"), now=T0)
    assert sorted(everywhere.replanned) == ["default/a", "other/x"]
    assert everywhere.window.to_json()["label"] == "team=billing"
    assert everywhere.window.target() == "label team=billing"
    assert (await store.get("a")).slot_at == ELEVEN + 2 * H, "11:00 and 12:00 are inside"
    assert (await store.get("b")).slot_at == ELEVEN, "another label: not covered"
    assert (await store.get("x", "other")).slot_at == ELEVEN + 2 * H
    # One tenant only.
    await store.windows.remove(everywhere.window.id, now=T0)
    scoped = await store.windows.add(
        ELEVEN, ELEVEN + 2 * H, label=("team", "billing"), tenant="other", now=T0
    )
    assert scoped.replanned == ("other/x",)
    assert scoped.window.target() == "label team=billing in tenant other"
    # 11:00 and 12:00 were recorded skipped ahead when the window came; its removal before
    # their time took the records back, so the job, no longer covered, runs them.
    skipped = await store.db.conn.execute(
        "SELECT scheduled_for FROM runs WHERE job_name = 'a' AND status = 'skipped'"
    )
    assert [r["scheduled_for"] for r in await skipped.fetchall()] == []
    assert (await store.get("a")).slot_at == ELEVEN
    # A job given the label later plans with the window at once, and its runs skip it.
    await store.definitions.apply([hourly("b", tenant="other", labels={"team": "billing"})], now=T0)
    assert (await store.get("b", "other")).slot_at == ELEVEN + 2 * H
    node = await open_session("n1")
    await store.definitions.apply([hourly("y", tenant="other", labels={"team": "billing"})], now=T0)
    await store.windows.add(ELEVEN + 3 * H, ELEVEN + 4 * H, label=("team", "billing"), now=T0)
    claimed = (await node.claim(ALL, 10, 0.0, now=ELEVEN + 2 * H)).jobs
    (y,) = [j for j in claimed if j.name == "y"]
    done, skips = after_run(y, Outcome("succeeded", None, 0.1), ELEVEN + 2 * H)
    assert done.next_slot == ELEVEN + 4 * H and [s.slot for s in skips] == [ELEVEN + 3 * H]


@pytest.mark.parametrize(
    "labels",
    ["team", "=x", {"": "x"}, {"a b": "x"}, {"k": ["x"]}, {"k": "x" * 201}, 5,
     {f"k{i}": "v" for i in range(33)}, ["k=1", "k=2"]],
)  # fmt: skip
def test_bad_labels_are_refused(labels: object) -> None:
    with pytest.raises(InvalidInput) as caught:
        hourly("a", labels=labels)
    assert caught.value.field == "labels", str(caught.value)


async def test_a_bad_label_window_writes_nothing(store: JobStore) -> None:
    with pytest.raises(InvalidInput, match="label"):
        await store.windows.add(ELEVEN, ELEVEN + H, label=("bad key", "x"), now=T0)
    with pytest.raises(InvalidInput, match="label"):
        await store.windows.add(ELEVEN, ELEVEN + H, label=("k", "x"), job="a", now=T0)
    assert await store.windows.list() == []


def test_the_cli_labels_jobs_lists_them_and_adds_windows(
    initialised: Invoke, settings: ClusterSettings
) -> None:
    for name, label in (("a", "team=billing"), ("b", "team=ops")):
        add = initialised("jobs", "add", name, "--schedule", "@hourly", "--handler",
                          "shell:true", "--label", label, "--label", "env=prod")  # fmt: skip
        assert add.exit_code == 0, add.stderr
    listed = initialised("jobs", "list", "--label", "team=billing", "--json")
    assert [(j["name"], j["labels"]) for j in json.loads(listed.stdout)] == [
        ("a", {"env": "prod", "team": "billing"})
    ]
    both = initialised("jobs", "list", "--label", "env=prod")
    assert " a " in both.stdout and " b " in both.stdout
    assert_bad_input(initialised("jobs", "list", "--label", "team"), "label")
    before = jobs_rows(settings)
    assert_bad_input(initialised("jobs", "add", "c", "--schedule", "@hourly", "--handler",
                                 "shell:true", "--label", "bad key=x"), "labels")  # fmt: skip
    assert jobs_rows(settings) == before
    start = (datetime.now(UTC) + timedelta(days=1)).replace(microsecond=0)
    span = ["--from", start.isoformat(), "--to", (start + H).isoformat()]
    made = initialised("windows", "add", *span, "--label", "team=billing", "--json")
    assert made.exit_code == 0, made.stderr
    window = json.loads(made.stdout)
    assert (window["scope"], window["label"], window["replanned"]) == (
        "label",
        "team=billing",
        ["default/a"],
    )
    listed_windows = initialised("windows", "list").stdout
    assert "label team=billing" in listed_windows
    assert_bad_input(initialised("windows", "add", *span, "--label", "team=x", "--job", "a"),
                     "label")  # fmt: skip
    assert_bad_input(initialised("windows", "add", *span, "--label", "nope"), "label")
    assert_bad_input(initialised("windows", "add", *span, "--label", "a=b", "--whole-cluster"),
                     "scope")  # fmt: skip
    assert len(json.loads(initialised("windows", "list", "--json").stdout)) == 1
