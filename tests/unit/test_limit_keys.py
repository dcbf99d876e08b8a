"""A job's ``uses`` and a key's ``--rate`` as users write them (cluster/jobs/limitkeys.py):
the periods, the bounds, one line naming the field for bad input; ``uses`` in job files,
``JobSpec.build`` and a ``Registry``."""

from __future__ import annotations

from typing import Any

import pytest

from cluster.errors import InvalidInput
from cluster.jobs.limitkeys import MAX_KEYS, Rate, parse_rate, parse_uses
from cluster.jobs.spec import JobSpec
from pulsecron import Registry


def export(ctx: Any) -> None:
    """A handler other nodes can import."""


@pytest.mark.parametrize(
    ("text", "count", "per_s", "shown"),
    [
        ("100/min", 100, 60, "100/min"),
        ("6/10s", 6, 10, "6/10s"),
        ("1/s", 1, 1, "1/s"),
        (" 3 / h ", 3, 3600, "3/h"),
        ("5/120s", 5, 120, "5/2min"),
        ("2/24h", 2, 86400, "2/24h"),
    ],
)
def test_a_rate_is_a_count_per_period(text: str, count: int, per_s: int, shown: str) -> None:
    rate = parse_rate(text)
    assert rate == Rate(count, per_s) and str(rate) == shown


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("0/min", "must allow 1 to 10,000 starts per period, got 0"),
        ("10001/s", "must allow 1 to 10,000 starts per period, got 10001"),
        ("100/day", "must be N/s, N/min or N/h (or N/10s), got '100/day'"),
        ("lots", "must be N/s, N/min or N/h (or N/10s), got 'lots'"),
        ("1/0s", "needs a period from 1s to 24h, got '1/0s'"),
        ("1/25h", "needs a period from 1s to 24h, got '1/25h'"),
    ],
)
def test_a_bad_rate_is_refused_naming_the_field(text: str, problem: str) -> None:
    with pytest.raises(InvalidInput) as caught:
        parse_rate(text)
    assert (caught.value.field, caught.value.problem) == ("rate", problem)


def test_uses_is_a_sorted_set_of_names() -> None:
    assert parse_uses("warehouse, partner-api,warehouse") == ("partner-api", "warehouse")
    assert parse_uses(["b", "a"]) == ("a", "b")
    assert parse_uses("") == parse_uses(None) == ()
    with pytest.raises(InvalidInput, match="uses: must not be empty"):
        parse_uses("a,,b")
    with pytest.raises(InvalidInput, match=f"at most {MAX_KEYS} keys"):
        parse_uses([f"k{i}" for i in range(MAX_KEYS + 1)])


def test_a_job_file_entry_and_a_registry_name_their_keys() -> None:
    entry = {"name": "e", "schedule": "@daily", "handler": "shell:true", "uses": ["b", "a"]}
    assert JobSpec.from_mapping(entry).uses == ("a", "b")
    registry = Registry()
    registry.every("10s", uses=["warehouse", "partner-api"])(export)
    (spec,) = registry.specs()
    assert spec.uses == ("partner-api", "warehouse")
