"""``--assert``: the grammar (metric names, comparisons, numbers, and/or, parentheses), read
by a parser that never evaluates Python, and what a run's metrics make of it."""

from __future__ import annotations

import pytest

from cluster.errors import InvalidInput
from cluster.jobs.assertions import MAX_CHECKS, failure, metric_name, normalized, parse_assert


@pytest.mark.parametrize(
    ("text", "canonical"),
    [
        ("rows > 0", "rows > 0"),
        ("rows>0 and errors==0", "rows > 0 and errors == 0"),
        ("a < 1 or b >= 2 and c != 3", "a < 1 or (b >= 2 and c != 3)"),
        ("(a < 1 or b >= 2) and c <= -1.5", "(a < 1 or b >= 2) and c <= -1.5"),
        ("db.rows_written > 1e3", "db.rows_written > 1000"),
    ],
)
def test_checks_parse_to_a_canonical_text(text: str, canonical: str) -> None:
    assert normalized(text) == canonical
    assert normalized(canonical) == canonical


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("", "is empty"),
        ("rows >", "expected a number but found the end"),
        ("rows 0", "expected a comparison"),
        ("> 0", "expected a metric name"),
        ("rows > 0 and", "expected a metric name but found the end"),
        ("rows > 0)", "unexpected ')'"),
        ("(rows > 0", "expected ')'"),
        ("rows = 0", "unexpected '='"),
        ("rows > zero", "expected a number"),
        ("rows > 1e999", "not a finite number"),
        ("Rows > 0", "'Rows' is not a metric name"),
        ("row-count > 0", "'row-count' is not a metric name"),
        ("__import__('os').system('x') > 0", "unexpected"),
        ("rows > 0 not errors > 1", "unexpected 'not'"),
        (" or ".join(["a > 1"] * (MAX_CHECKS + 1)), f"at most {MAX_CHECKS} comparisons"),
        ("a > 1 " + "x" * 600, "longer than 500"),
        ("(" * 240 + "a > 1" + ")" * 240, "parentheses nested"),
        ("(" * 17 + "a > 1" + ")" * 17, "more than 16 parentheses nested"),
    ],
)
def test_bad_checks_are_refused_naming_the_field(text: str, problem: str) -> None:
    with pytest.raises(InvalidInput) as caught:
        parse_assert(text)
    assert caught.value.field == "assert"
    assert problem in caught.value.problem


def test_what_metrics_make_of_the_checks() -> None:
    assert failure("rows > 0", {"rows": 1}) is None
    assert failure("rows > 0", {"rows": 0}) == "rows > 0 (rows=0)"
    assert failure("rows > 0", {}) == "rows > 0 (rows not reported)"
    both = "rows > 0 and errors == 0"
    assert failure(both, {"rows": 5, "errors": 2}) == "errors == 0 (errors=2)"
    either = "rows > 0 or skipped == 1"
    assert failure(either, {"skipped": 1}) is None
    assert failure(either, {"rows": 0, "skipped": 0}) == (
        "rows > 0 (rows=0) and skipped == 1 (skipped=0)"
    )
    assert failure("(a > 1 or b > 1) and c < 5", {"b": 2, "c": 4}) is None


def test_metric_names() -> None:
    assert metric_name("rows") == "rows"
    assert metric_name("db.rows_2") == "db.rows_2"
    for bad in ("", "2rows", ".rows", "Rows", "rows count", "x" * 65, None, 3):
        with pytest.raises(InvalidInput):
            metric_name(bad)
