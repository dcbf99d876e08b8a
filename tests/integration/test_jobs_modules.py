"""``pulse jobs apply --module`` and ``pulse jobs export --module`` against a real
Postgres, and ``store.definitions.sync`` (``pulse node --sync-jobs``) under concurrent starts."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from cluster.jobs.registry import registries_in, specs_of
from cluster.settings import ClusterSettings
from cluster.store.jobstore.store import JobStore
from tests.helpers.cli import add_args, assert_bad_input, invoke, jobs_rows

BILLING = "tests.registries.billing"


@pytest.fixture
def initialised(settings: ClusterSettings) -> ClusterSettings:
    assert invoke(settings, "init", "--shards", "16").exit_code == 0
    return settings


def test_apply_module_is_idempotent_and_matches_the_exported_file(
    initialised: ClusterSettings, tmp_path: Path
) -> None:
    first = invoke(initialised, "jobs", "apply", "--module", BILLING)
    assert first.exit_code == 0, first.output
    assert first.stdout.splitlines() == [
        "created acme/billing_rollup",
        "created beat",
        "2 created, 0 updated, 0 removed, 0 unchanged",
    ]
    rows = jobs_rows(initialised)
    again = invoke(initialised, "jobs", "apply", "--module", BILLING, "--json")
    assert json.loads(again.stdout)["unchanged"] == ["acme/billing_rollup", "beat"]
    exported = invoke(initialised, "jobs", "export", "--module", BILLING)
    assert exported.exit_code == 0, exported.output
    path = tmp_path / "jobs.yaml"
    path.write_text(exported.stdout, "utf-8")
    from_file = invoke(initialised, "jobs", "apply", str(path))
    assert from_file.stdout.strip() == "no changes (2 jobs unchanged)"
    assert jobs_rows(initialised) == rows
    show = ("jobs", "show", "billing_rollup", "--tenant", "acme", "--json")
    shown = json.loads(invoke(initialised, *show).stdout)
    assert (shown["catch_up"], shown["timeout_s"], shown["payload"]) == (
        "backfill",
        600.0,
        {"plan": "pro"},
    )
    assert shown["handler"] == f"{BILLING}:billing_rollup"


def test_apply_module_updates_and_prunes(initialised: ClusterSettings) -> None:
    assert invoke(initialised, *add_args("stray")).exit_code == 0
    invoke(initialised, "jobs", "apply", "--module", BILLING)
    changed = invoke(
        initialised, "jobs", "apply", "--module", "tests.registries.changed", "--prune"
    )
    assert changed.exit_code == 0, changed.output
    lines = changed.stdout.splitlines()
    assert lines[0] == "updated beat"
    assert sorted(lines[1:3]) == ["removed acme/billing_rollup", "removed stray"]
    assert lines[3:] == ["0 created, 1 updated, 2 removed, 0 unchanged"]
    listed = json.loads(invoke(initialised, "jobs", "list", "--json").stdout)
    assert [(j["name"], j["schedule"]) for j in listed] == [("beat", "@every 2s")]


@pytest.mark.parametrize(
    ("args", "field"),
    [
        (["--module", "tests.registries.missing"], "module"),
        (["--module", "tests.registries.empty"], "module"),
        (["--module", BILLING, "--module", "tests.registries.broken"], "module"),
        (["--module", BILLING, "--prune", "--module", "tests.registries.empty"], "module"),
        (["jobs.yaml", "--module", BILLING], "jobs"),
        ([], "jobs"),
    ],
)
def test_bad_modules_exit_2_with_one_line_and_write_nothing(
    initialised: ClusterSettings, args: list[str], field: str
) -> None:
    assert invoke(initialised, *add_args("existing")).exit_code == 0
    before = jobs_rows(initialised)
    assert_bad_input(invoke(initialised, "jobs", "apply", *args), field)
    assert jobs_rows(initialised) == before


def test_export_refuses_bad_modules_with_one_line(initialised: ClusterSettings) -> None:
    empty = invoke(initialised, "jobs", "export", "--module", "tests.registries.empty")
    assert_bad_input(empty, "module")
    assert_bad_input(invoke(initialised, "jobs", "export"), "module")


async def test_sync_creates_once_and_reports_what_differs(settings: ClusterSettings) -> None:
    specs = specs_of(registries_in(BILLING))
    changed = specs_of(registries_in("tests.registries.changed"))
    async with JobStore.open(settings) as store:
        await store.init(shards=16)

    async def sync_once() -> tuple[list[str], list[str], list[str]]:
        async with JobStore.open(settings) as store:
            result = await store.definitions.sync(specs)
            return result.created, result.unchanged, result.differing

    # Several nodes starting at once: the advisory lock makes them sync in turn.
    results = await asyncio.gather(*(sync_once() for _ in range(4)))
    created = [r for r in results if r[0]]
    assert len(created) == 1 and sorted(created[0][0]) == ["acme/billing_rollup", "beat"]
    assert all(r[1] == ["acme/billing_rollup", "beat"] for r in results if not r[0])
    async with JobStore.open(settings) as store:
        before = await store.get("beat")
        result = await store.definitions.sync(changed)
        assert (result.created, result.unchanged, result.differing) == ([], [], ["beat"])
        after = await store.get("beat")
        # Left as applied: the savepoint that compared the definitions was rolled back.
        assert (after.schedule, after.updated_at) == (before.schedule, before.updated_at)


def test_apply_module_offers_the_registries_handlers_to_the_api(
    initialised: ClusterSettings,
) -> None:
    for module in (BILLING, "tests.registries.offers"):
        done = invoke(initialised, "jobs", "apply", "--module", module)
        assert done.exit_code == 0, done.output

    async def read() -> tuple[set[tuple[str, str, str]], frozenset[str], frozenset[str]]:
        async with JobStore.open(initialised) as store:
            rows = await store.handlers.all()
            return (
                {(r.tenant, r.handler, r.registered_by) for r in rows},
                await store.handlers.usable("acme"),
                await store.handlers.usable(None),
            )

    found, acme, anyone = asyncio.run(read())
    assert found == {
        ("acme", f"{BILLING}:billing_rollup", "pulse jobs apply"),
        ("default", f"{BILLING}:beat", "pulse jobs apply"),
        ("acme", "tests.registries.offers:acme_report", "pulse jobs apply"),
        ("globex", "tests.registries.offers:globex_report", "pulse jobs apply"),
    }
    assert acme == {f"{BILLING}:billing_rollup", "tests.registries.offers:acme_report"}
    assert anyone == {handler for _, handler, _ in found}


def test_pulse_handlers_lists_and_removes_offers(initialised: ClusterSettings) -> None:
    assert invoke(initialised, "handlers", "list").stdout.strip() == "no handlers offered"
    assert (
        invoke(initialised, "jobs", "apply", "--module", "tests.registries.offers").exit_code == 0
    )
    listed = json.loads(invoke(initialised, "handlers", "list", "--json").stdout)
    assert [(r["tenant"], r["handler"], r["registered_by"]) for r in listed] == [
        ("acme", "tests.registries.offers:acme_report", "pulse jobs apply"),
        ("globex", "tests.registries.offers:globex_report", "pulse jobs apply"),
    ]
    assert set(listed[0]) == {"tenant", "handler", "registered_by", "registered_at"}
    text = invoke(initialised, "handlers", "list").stdout.splitlines()
    assert text[0].split() == ["TENANT", "HANDLER", "BY", "REGISTERED"]
    gone = invoke(initialised, "handlers", "remove", "tests.registries.offers:acme_report")
    assert gone.stdout.strip() == "removed 1 offer of tests.registries.offers:acme_report"
    left = json.loads(invoke(initialised, "handlers", "list", "--json").stdout)
    assert [r["tenant"] for r in left] == ["globex"]
    none = invoke(initialised, "handlers", "remove", "x.y:z", "--tenant", "acme")
    assert none.exit_code == 0 and none.stdout.strip() == "removed 0 offers of x.y:z"
