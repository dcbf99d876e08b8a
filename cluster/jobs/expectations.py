"""A job's expectations of its runs, parsed and checked together: ``expect_max``,
``expect_min``, ``deadline``, ``expect_baseline``, ``assert`` and ``assert_fails``
(docs/jobs.md, docs/design/expectations.md).

Together, because they constrain each other (a minimum above the maximum is refused) and
because every surface that defines jobs (``pulse jobs add``, job files, the API,
``Registry``) goes through ``JobSpec.build``, which calls ``expectations`` once.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from cluster.errors import InvalidInput
from cluster.jobs.assertions import normalized
from cluster.jobs.fields import optional_duration
from cluster.timing.deadlines import parse_deadline

MAX_BASELINE = 1000.0
_BASELINE = re.compile(r"^\s*([0-9]+(?:\.[0-9]+)?)\s*x?\s*$")
# Successful runs a baseline needs before it applies: fewer say little about the job.
BASELINE_MIN_RUNS = 5
# The newest kept successful runs its p95 is taken over.
BASELINE_RUNS = 1000


@dataclass(frozen=True)
class Expectations:
    expect_max_s: float | None = None
    expect_min_s: float | None = None
    deadline: str | None = None  # HH:MM in the job's zone
    expect_baseline: float | None = None  # times the p95 of the job's kept successful runs
    asserts: str | None = None  # checks of the run's metrics (cluster.jobs.assertions)
    assert_fails: bool = False  # a failed check fails the run instead of raising an alert


def parse_baseline(value: object) -> float | None:
    """``3x``, ``3`` or ``2.5x``: a factor of at least 1."""
    if value is None:
        return None
    if isinstance(value, bool):
        raise InvalidInput("expect_baseline", "must be a factor like 3x")
    if isinstance(value, int | float):
        factor = float(value)
    else:
        found = _BASELINE.match(value) if isinstance(value, str) else None
        if found is None:
            raise InvalidInput("expect_baseline", f"{value!r} is not a factor like 3x")
        factor = float(found[1])
    if not 1 <= factor <= MAX_BASELINE:
        raise InvalidInput("expect_baseline", f"must be between 1x and {MAX_BASELINE:g}x")
    return factor


def expectations(
    expect_max: object = None,
    expect_min: object = None,
    deadline: object = None,
    expect_baseline: object = None,
    asserts: object = None,
    assert_fails: object = False,
) -> Expectations:
    """Every field checked, then the pairs; ``InvalidInput`` names the first bad one."""
    found = Expectations(
        expect_max_s=optional_duration(expect_max, "expect_max"),
        expect_min_s=optional_duration(expect_min, "expect_min"),
        deadline=None if deadline is None else parse_deadline(deadline),
        expect_baseline=parse_baseline(expect_baseline),
        asserts=normalized(asserts),
        assert_fails=assert_fails,  # type: ignore[arg-type]  # checked below
    )
    if not isinstance(assert_fails, bool):
        raise InvalidInput("assert_fails", "must be true or false")
    if assert_fails and found.asserts is None:
        raise InvalidInput("assert_fails", "needs an --assert")
    low, high = found.expect_min_s, found.expect_max_s
    if low is not None and high is not None and low > high:
        raise InvalidInput("expect_min", f"{low:g}s is more than expect_max ({high:g}s)")
    return found
