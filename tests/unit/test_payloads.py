"""Payload schemas (``cluster.jobs.payloads``) and their place in ``JobSpec``: schemas
checked against their metaschema and bounded, payloads checked with one line naming where
they break, and the RFC 7386 merge of ``trigger --merge-payload``."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

from cluster.errors import InvalidInput
from cluster.jobs.budgets import OverBudget, off_loop, within
from cluster.jobs.payloads import (
    MAX_SCHEMA_BYTES,
    check_payload,
    merge_payload,
    parse_payload_schema,
)
from cluster.jobs.spec import JobSpec

SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "region": {"enum": ["eu", "us"]},
        "days": {"type": "integer", "minimum": 1},
        "opts": {"type": "object", "properties": {"dry": {"type": "boolean"}}},
    },
    "required": ["region"],
    "additionalProperties": False,
}


def test_a_schema_is_checked_against_its_metaschema() -> None:
    assert parse_payload_schema(SCHEMA) == SCHEMA
    assert parse_payload_schema('{"type": "object"}') == {"type": "object"}
    assert parse_payload_schema(None) is None
    with pytest.raises(InvalidInput) as bad:
        parse_payload_schema({"type": "objekt"})
    assert bad.value.field == "payload_schema" and "\n" not in str(bad.value)
    with pytest.raises(InvalidInput, match="payload_schema"):
        parse_payload_schema("[1, 2]")
    with pytest.raises(InvalidInput, match="payload_schema"):
        parse_payload_schema({"$schema": "https://example.com/not-a-metaschema"})


def test_a_schema_is_bounded_in_size() -> None:
    big = {"type": "object", "description": "x" * MAX_SCHEMA_BYTES}
    with pytest.raises(InvalidInput, match="larger than 64 KiB") as bad:
        parse_payload_schema(big)
    assert bad.value.field == "payload_schema"


@pytest.mark.parametrize(
    ("payload", "where"),
    [
        ({}, "'region' is a required property"),
        ({"region": "mars"}, "at region:"),
        ({"region": "eu", "days": 0}, "at days:"),
        ({"region": "eu", "opts": {"dry": "yes"}}, "at opts.dry:"),
        ({"region": "eu", "extra": 1}, "Additional properties"),
    ],
)
def test_a_payload_breaking_its_schema_is_one_line_naming_where(
    payload: dict[str, Any], where: str
) -> None:
    with pytest.raises(InvalidInput) as bad:
        check_payload(SCHEMA, payload)
    assert bad.value.field == "payload"
    assert "does not match payload_schema" in str(bad.value) and where in str(bad.value)
    assert "\n" not in str(bad.value)
    check_payload(SCHEMA, {"region": "us", "days": 3, "opts": {"dry": True}})
    check_payload(None, {"anything": ["goes"]})


def test_a_remote_ref_is_never_fetched() -> None:
    schema = parse_payload_schema({"$ref": "https://127.0.0.1:9/schema.json"})
    with pytest.raises(InvalidInput, match="cannot be applied") as bad:
        check_payload(schema, {})
    assert bad.value.field == "payload_schema"


def test_merge_follows_rfc_7386() -> None:
    base = {"region": "eu", "days": 3, "opts": {"dry": True, "note": "x"}}
    assert merge_payload(base, {"days": 7}) == {"region": "eu", "days": 7, "opts": base["opts"]}
    assert merge_payload(base, {"days": None, "opts": {"note": None}}) == {
        "region": "eu",
        "opts": {"dry": True},
    }
    assert merge_payload(base, {"opts": [1]})["opts"] == [1]
    assert merge_payload({"a": 1}, {"b": {"c": None, "d": 2}}) == {"a": 1, "b": {"d": 2}}
    assert base["opts"] == {"dry": True, "note": "x"}, "the base is not changed"


def test_a_spec_checks_its_payload_against_its_schema() -> None:
    spec = JobSpec.build(
        "roll", "@daily", "shell:true", payload={"region": "eu"}, payload_schema=SCHEMA
    )
    assert spec.payload_schema == SCHEMA and spec.validated() == spec
    entry = {"name": "roll", "schedule": "@daily", "handler": "shell:true"}
    assert JobSpec.from_mapping({**entry, "payload_schema": SCHEMA, "payload": {"region": "us"}})
    with pytest.raises(InvalidInput) as bad:
        JobSpec.from_mapping({**entry, "payload_schema": SCHEMA})
    assert bad.value.field == "payload"
    with pytest.raises(InvalidInput) as bad:
        JobSpec.from_mapping({**entry, "payload_schema": ["not", "a", "schema"]})
    assert bad.value.field == "payload_schema"


def test_a_registry_job_takes_a_payload_schema() -> None:
    from cluster.chaos.witness import record
    from cluster.jobs.registry import export_yaml, specs_of
    from pulsecron import Registry

    jobs = Registry("acme")
    jobs.add(record, "@daily", name="ok", payload={"region": "eu"}, payload_schema=SCHEMA)
    (spec,) = specs_of([jobs])
    assert spec.payload_schema == SCHEMA
    assert "payload_schema:" in export_yaml([jobs])
    with pytest.raises(InvalidInput) as bad:
        jobs.add(record, "@daily", name="bad", payload={"region": "mars"}, payload_schema=SCHEMA)
    assert bad.value.field == "payload"


def nested(levels: int) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": "string"}
    for _ in range(levels):
        schema = {"type": "object", "properties": {"a": schema}}
    return schema


def exponential(levels: int) -> dict[str, Any]:
    """``levels`` of anyOf over two references to the level below: 2^levels subschemas."""
    defs: dict[str, Any] = {"d0": {"type": "string"}}
    for i in range(1, levels + 1):
        ref = {"$ref": f"#/$defs/d{i - 1}"}
        defs[f"d{i}"] = {"anyOf": [ref, dict(ref)]}
    return {"$defs": defs, "type": "object", "properties": {"x": {"$ref": f"#/$defs/d{levels}"}}}


@pytest.mark.parametrize(
    ("schema", "problem"),
    [
        (exponential(15), "more than 512 subschemas with its $refs written out"),
        ({"$defs": {"a": {"$ref": "#/$defs/a"}}, "$ref": "#/$defs/a"}, "a cycle"),
        ({"properties": {"a": {"$ref": "#"}}}, "$ref must be one of the schema's own"),
        ({"properties": {"a": {"$ref": "#/properties"}}}, "$ref must be one of"),
        ({"properties": {"a": {"type": "string", "pattern": "^(a+)+$"}}}, "pattern is refused"),
        ({"patternProperties": {"^x": {}}}, "patternProperties is refused"),
        ({"propertyNames": {"pattern": "(a|a)*$"}}, "pattern is refused"),
        ({"type": "array", "uniqueItems": True}, "uniqueItems needs a maxItems"),
        ({"type": "array", "uniqueItems": True, "maxItems": 10**6}, "uniqueItems needs"),
        ({"$dynamicRef": "#x"}, "dynamic references are refused"),
        ({"properties": {"a": {"$id": "https://x/y"}}}, "$id is refused below the root"),
        (nested(40), "nested deeper than 32"),
        ({"anyOf": [{"type": "string"}] * 600}, "more than 512 subschemas"),
    ],
    ids=[
        "exponential",
        "cycle",
        "root-ref",
        "pointer",
        "pattern",
        "pattern-properties",
        "property-names",
        "unique-unbounded",
        "unique-huge",
        "dynamic",
        "id",
        "deep",
        "wide",
    ],
)
def test_a_schema_over_the_api_is_refused_outside_the_bounded_dialect(
    schema: dict[str, Any], problem: str
) -> None:
    with within(), pytest.raises(InvalidInput) as caught:
        parse_payload_schema(schema)
    assert caught.value.field == "payload_schema"
    assert problem in caught.value.problem, caught.value.problem


def test_the_operators_schema_may_use_the_whole_of_json_schema() -> None:
    """Without a budget (the CLI, files, Registry) the dialect does not apply."""
    schema = {"type": "object", "properties": {"a": {"type": "string", "pattern": "^a+$"}}}
    assert parse_payload_schema(schema) == schema
    check_payload(schema, {"a": "aaa"})
    with within(), pytest.raises(InvalidInput) as caught:  # but not for a payload of the API
        check_payload(schema, {"a": "aaa"})
    assert caught.value.field == "payload_schema"


def test_a_check_past_its_budget_stops_and_says_so() -> None:
    """The worst a schema in the dialect can do: every keyword spends the budget."""
    levels: dict[str, Any] = {"d0": {"type": "object"}}
    for i in range(1, 6):
        ref = {"$ref": f"#/$defs/d{i - 1}"}
        levels[f"d{i}"] = {"anyOf": [ref, dict(ref), {"type": "integer"}]}
    schema = {"$defs": levels, "type": "object",
              "properties": {"x": {"type": "array", "items": {"$ref": "#/$defs/d5"}}}}  # fmt: skip
    with within(0.2):
        parse_payload_schema(schema)
        started = time.monotonic()
        with pytest.raises(OverBudget) as caught:
            check_payload(schema, {"x": [1.5] * 100_000})
    assert caught.value.field == "payload" and "budget" in caught.value.problem
    assert time.monotonic() - started < 5  # it stopped near its budget, not after the lot


def test_unique_items_is_checked_in_linear_time_under_a_budget() -> None:
    schema = {"type": "array", "uniqueItems": True, "maxItems": 1000}
    wrapped = {"type": "object", "properties": {"a": schema}}
    with within():
        parse_payload_schema(wrapped)
        check_payload(wrapped, {"a": [{"k": i} for i in range(1000)]})
        for same in ([1, 1.0], [{"a": [1]}, {"a": [1.0]}], ["x", "x"]):
            with pytest.raises(InvalidInput, match="non-unique"):
                check_payload(wrapped, {"a": same})
        check_payload(wrapped, {"a": [1, True, "1", [1]]})  # true is not 1 in JSON Schema


def test_a_payload_nested_too_deeply_is_refused() -> None:
    deep: dict[str, Any] = {}
    for _ in range(500):
        deep = {"a": deep}
    with pytest.raises(InvalidInput) as caught:
        JobSpec.build("deep", "@hourly", "shell:/bin/true", payload=deep)
    assert caught.value.field == "payload" and "nested deeper than" in caught.value.problem


async def test_a_check_that_never_spends_is_answered_after_its_budget() -> None:
    """One step running long (not a keyword: nothing spends) is answered anyway; its thread
    is released afterwards."""
    release = threading.Event()
    with within(0.05), pytest.raises(OverBudget) as caught:
        await off_loop(lambda: release.wait(60))
    release.set()
    assert "budget" in caught.value.problem
    assert await off_loop(lambda: 42) == 42  # without a budget: just off the loop
