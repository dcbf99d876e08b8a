"""Jobs defined in code (``cluster.jobs.registry``): every option of ``pulse jobs add`` is a
keyword validated as job files are, unimportable handlers are refused at decoration time,
modules are found and refused with one line, and the export is a job file that applies the
same specs."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click
import pytest

from cluster.cli.jobs import jobs as jobs_group
from cluster.errors import InvalidInput
from cluster.jobs.files import load_specs
from cluster.jobs.registry import (
    export_yaml,
    handler_ref,
    handlers_of,
    load_modules,
    registries_in,
    specs_of,
)
from cluster.jobs.spec import JobSpec
from pulsecron import Registry, RunContext

SAMPLES: dict[str, Any] = {
    "tz": "Europe/Paris",
    "payload": {"plan": "pro"},
    "catch_up": "backfill",
    "grace": "2m",
    "max_backfill": 7,
    "timeout": "10m",
    "retries": 3,
    "retry_backoff": "30s",
    "dst_repeated": "twice",
    "dst_skipped": "skip",
    "keep_for": "7d",
    "keep_runs": 50,
    "output_limit": "32KiB",
    "late_after": "5m",
    "pause_after_failures": 4,
    "paused": True,
    "max_runs": 3,
    "labels": {"team": "billing"},
    "expect_max": "10m",
    "expect_min": "30s",
    "deadline": "06:00",
    "expect_baseline": "3x",
    "asserts": "rows > 0",
    "assert_fails": False,  # alone it needs an assert; together with the one above it holds
}
SET_BY_REGISTRY = {"name", "schedule", "schedules", "at", "handler", "tenant", "as_json"}


def rollup(ctx: RunContext) -> None:
    return None


def add_options() -> list[click.Option]:
    command = jobs_group.commands["add"]
    return [
        p
        for p in command.params
        if isinstance(p, click.Option) and p.expose_value and p.name not in SET_BY_REGISTRY
    ]


def test_every_option_of_jobs_add_is_a_keyword() -> None:
    options = add_options()
    assert {"timeout", "retries", "catch_up", "paused"} <= {o.name for o in options}
    for option in options:
        assert option.name is not None
        if option.name in ("celery_broker", "celery_wait", "env_names", "web_url"):
            continue  # they shape a celery: or shell: handler; a registry's is its function
        # An option added later without a sample here is still checked with its default.
        value = SAMPLES.get(option.name, True if option.is_flag else option.default)
        registry = Registry(tenant="acme")
        spec = registry.cron("0 * * * *", **{option.name: value})(rollup) and registry.specs()[0]
        expected = JobSpec.from_mapping(
            {
                "name": "rollup",
                "schedule": "0 * * * *",
                "handler": f"{__name__}:rollup",
                "tenant": "acme",
                option.name: value,
            }
        )
        assert spec == expected, option.name


def test_all_options_together_and_the_derived_name_and_handler() -> None:
    registry = Registry(tenant="acme")
    decorated = registry.cron("0 * * * *", **SAMPLES)(rollup)
    assert decorated is rollup
    (spec,) = registry.specs()
    assert (spec.name, spec.handler, spec.tenant) == ("rollup", f"{__name__}:rollup", "acme")
    assert (spec.tz, spec.catch_up, spec.timeout_s, spec.retries) == (
        "Europe/Paris",
        "backfill",
        600.0,
        3,
    )
    assert spec.paused and spec.payload == {"plan": "pro"} and spec.output_limit == 32 * 1024


def test_every_takes_a_duration_or_seconds() -> None:
    registry = Registry()
    registry.every("30s", name="a")(rollup)
    registry.every(90, name="b")(rollup)
    assert [s.schedule for s in registry.specs()] == ["@every 30s", "@every 1m30s"]


@pytest.mark.parametrize(
    ("expr", "options", "field"),
    [
        ("61 * * * *", {}, "schedule"),
        ("0 * * * *", {"tz": "Mars/Olympus"}, "tz"),
        ("0 * * * *", {"timeout": "ten minutes"}, "timeout"),
        ("0 * * * *", {"retries": -1}, "retries"),
        ("0 * * * *", {"catch_up": "sometimes"}, "catch_up"),
        ("0 * * * *", {"colour": "blue"}, "colour"),
        ("0 * * * *", {"payload": [1, 2]}, "payload"),
        ("0 * * * *", {"name": ""}, "name"),
    ],
)
def test_bad_input_fails_at_decoration_with_the_cli_message(
    expr: str, options: dict[str, Any], field: str
) -> None:
    with pytest.raises(InvalidInput) as raised:
        Registry().cron(expr, **options)(rollup)
    assert raised.value.field == field
    entry = {"name": "rollup", "schedule": expr, "handler": f"{__name__}:rollup", **options}
    with pytest.raises(InvalidInput) as cli:
        JobSpec.from_mapping(entry)
    assert str(raised.value) == str(cli.value)
    assert "\n" not in str(raised.value)


def test_every_refuses_a_bad_interval() -> None:
    with pytest.raises(InvalidInput, match=r"^schedule: "):
        Registry().every("soon")(rollup)


def test_functions_other_nodes_cannot_import_are_refused() -> None:
    def nested(ctx: RunContext) -> None:
        return None

    class Jobs:
        def method(self, ctx: RunContext) -> None:
            return None

    def in_main(ctx: RunContext) -> None:
        return None

    in_main.__module__ = "__main__"
    in_main.__qualname__ = "in_main"
    refused = {
        "nested": nested,
        "lambda": lambda ctx: None,
        "method": Jobs.method,
        "__main__": in_main,
    }
    for why, fn in refused.items():
        with pytest.raises(InvalidInput) as raised:
            Registry().cron("0 * * * *")(fn)
        assert raised.value.field == "handler", why
        assert why in str(raised.value)
    assert handler_ref(rollup) == f"{__name__}:rollup"


def test_reserved_keys_bad_tenants_and_duplicates_are_refused() -> None:
    with pytest.raises(InvalidInput, match=r"^tenant: must not be empty"):
        Registry(tenant=" ")
    registry = Registry()
    with pytest.raises(InvalidInput, match=r"^handler: "):
        registry.cron("0 * * * *", handler="x.y:z")(rollup)
    registry.cron("0 * * * *")(rollup)
    with pytest.raises(InvalidInput, match=r"^name: 'rollup' is registered twice"):
        registry.cron("5 * * * *")(rollup)
    other = Registry()
    other.every("1m", name="rollup")(rollup)
    with pytest.raises(InvalidInput, match="defined twice"):
        specs_of([registry, other])


def test_a_module_is_found_by_its_registries() -> None:
    registries = registries_in("tests.registries.billing")
    names = sorted(s.name for s in specs_of(registries))
    assert names == ["beat", "billing_rollup"]
    specs = {s.name: s for s in specs_of(registries)}
    assert specs["billing_rollup"].handler == "tests.registries.billing:billing_rollup"
    assert specs["billing_rollup"].tenant == "acme"


@pytest.mark.parametrize(
    ("module", "problem"),
    [
        ("tests.registries.missing", "tests.registries.missing does not import"),
        ("tests.registries.empty", "tests.registries.empty holds no pulsecron Registry"),
        ("tests.registries.broken", "tests.registries.broken: rollup: tz: unknown time zone"),
    ],
)
def test_modules_that_do_not_import_or_hold_no_registry_are_refused(
    module: str, problem: str
) -> None:
    with pytest.raises(InvalidInput) as raised:
        load_modules(["tests.registries.billing", module])
    assert raised.value.field == "module"
    assert raised.value.problem.startswith(problem), raised.value.problem
    assert "\n" not in str(raised.value)


def test_export_is_a_job_file_of_the_same_specs(tmp_path: Path) -> None:
    registries = registries_in("tests.registries.billing")
    registry = Registry(tenant="acme")
    registry.cron("0 * * * *", **SAMPLES)(rollup)
    registries.append(registry)
    path = tmp_path / "jobs.yaml"
    path.write_text(export_yaml(registries), "utf-8")
    assert load_specs(str(path)) == specs_of(registries)


def test_every_refused_decorator_of_a_module_is_reported() -> None:
    with pytest.raises(InvalidInput) as raised:
        registries_in("tests.registries.broken")
    problem = raised.value.problem
    assert "rollup: tz: unknown time zone" in problem and "cleanup: timeout: " in problem
    assert "fine" not in problem
    # Outside ``registries_in`` the same decorator raises at once.
    with pytest.raises(InvalidInput, match=r"^tz: "):
        Registry().cron("0 * * * *", tz="Mars/Olympus")(rollup)


def report(ctx: RunContext) -> None:
    return None


def test_a_registry_offers_its_jobs_and_its_handlers_to_the_api() -> None:
    registry = Registry(tenant="acme")
    registry.cron("@hourly")(rollup)
    assert registry.handler(report) is report, "the function is returned as it was"
    registry.handler()(report)
    assert registry.handler_refs() == [f"{__name__}:rollup", f"{__name__}:report"]
    assert len(registry) == 1, "an offered handler is not a job"
    other = Registry()
    assert handlers_of([registry, other]) == [
        ("acme", f"{__name__}:rollup"),
        ("acme", f"{__name__}:report"),
    ]
    with pytest.raises(InvalidInput):
        registry.handler(lambda ctx: None)
