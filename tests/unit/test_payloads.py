"""Payload schemas (``cluster.jobs.payloads``) and their place in ``JobSpec``: schemas
checked against their metaschema and bounded, payloads checked with one line naming where
they break, and the RFC 7386 merge of ``trigger --merge-payload``."""

from __future__ import annotations

from typing import Any

import pytest

from cluster.errors import InvalidInput
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
