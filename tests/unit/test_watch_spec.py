"""A watch job's definition (cluster/jobs/spec.py): `watch: true` in job files and the
Registry, a handler that may be left out, and what a watch job cannot be."""

from __future__ import annotations

import pytest

from cluster.errors import InvalidInput
from cluster.jobs.registry import Registry
from cluster.jobs.spec import JobSpec


def test_a_job_file_entry_with_watch_true_needs_no_handler() -> None:
    spec = JobSpec.from_mapping({"name": "cron", "schedule": "0 3 * * *", "watch": True})
    assert (spec.watch, spec.handler) == (True, "")
    assert spec.validated() == spec
    with pytest.raises(InvalidInput) as missing:
        JobSpec.from_mapping({"name": "cron", "schedule": "0 3 * * *"})
    assert missing.value.field == "handler"


def test_a_watch_entry_keeps_its_handler_for_adoption() -> None:
    spec = JobSpec.from_mapping(
        {"name": "cron", "schedule": "0 3 * * *", "watch": True, "handler": "shell:/bin/true"}
    )
    assert spec.handler.startswith("shell:")


@pytest.mark.parametrize(
    ("entry", "field"),
    [
        ({"watch": "yes"}, "watch"),
        ({"watch": True, "zones": ["a"]}, "watch"),
        ({"watch": True, "each_zone": True}, "watch"),
        ({"watch": True, "overlap": "allow"}, "watch"),
        ({"watch": True, "schedule": "@at 2030-01-01T00:00:00Z"}, "watch"),
        ({"watch": True, "max_runs": 3}, "watch"),  # before, accepted and never counted
    ],
)
def test_what_a_watch_job_cannot_be(entry: dict[str, object], field: str) -> None:
    with pytest.raises(InvalidInput) as caught:
        JobSpec.from_mapping({"name": "cron", "schedule": "0 3 * * *", **entry})
    assert caught.value.field == field


def nightly() -> None:
    """A job a legacy cron runs for now."""


def test_a_registry_job_can_be_watched_until_adopted() -> None:
    registry = Registry("acme")
    registry.cron("0 3 * * *", watch=True)(nightly)
    (spec,) = registry.specs()
    assert (spec.watch, spec.tenant, spec.handler) == (True, "acme", f"{__name__}:nightly")
