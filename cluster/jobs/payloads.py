"""A job's inputs: its ``payload_schema`` (a JSON Schema), payloads checked against it, and
the merge of ``pulse jobs trigger --merge-payload``.

The schema is checked by whoever writes a payload (``jobs add``, ``jobs apply``, the API,
the Python API, ``jobs trigger``), never by a node: a fire costs nothing more. The
``jsonschema`` library does the work; Pulse bounds the schema's size and never fetches a
remote ``$ref``: validators get an empty registry, which retrieves nothing (without one, the
library would fetch a remote ``$ref`` over HTTP); only references inside the schema resolve.

Under a time budget (``cluster.jobs.budgets``: what ``pulse web`` checks), a schema must be
in the API's dialect (``cluster.jobs.schemadialect``), and every keyword applied spends the
budget, so a check ends soon after it is spent; ``uniqueItems`` is checked in linear time.
Why so: docs/design/inputs.md.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from functools import cache
from typing import Any

from jsonschema import exceptions, validators
from jsonschema.protocols import Validator
from referencing import Registry
from referencing.exceptions import Unresolvable

from cluster.errors import InvalidInput
from cluster.jobs import schemadialect
from cluster.jobs.budgets import bounded, spend
from cluster.jobs.fields import parse_payload

__all__ = ["MAX_SCHEMA_BYTES", "check_payload", "merge_payload", "parse_payload_schema"]

MAX_SCHEMA_BYTES = 64 * 1024
_MAX_MESSAGE = 200  # characters of the library's message kept in the one-line error


def parse_payload_schema(value: str | Mapping[str, Any] | None) -> dict[str, Any] | None:
    """A JSON Schema (text or mapping) of at most 64 KiB, checked against its own
    metaschema (its ``$schema``, else draft 2020-12); None for no schema."""
    if value is None:
        return None
    schema = parse_payload(value, "payload_schema")
    if len(json.dumps(schema, ensure_ascii=False).encode()) > MAX_SCHEMA_BYTES:
        raise InvalidInput("payload_schema", f"larger than {MAX_SCHEMA_BYTES // 1024} KiB")
    if bounded():
        schemadialect.check(schema)
    cls = _validator(schema)
    if cls is None:
        raise InvalidInput("payload_schema", f"unknown $schema {_line(str(schema['$schema']))}")
    try:
        cls.check_schema(schema)
    except exceptions.SchemaError as exc:
        raise InvalidInput("payload_schema", _where(exc) + _line(exc.message)) from exc
    return schema


def check_payload(
    schema: Mapping[str, Any] | None, payload: Mapping[str, Any], field_name: str = "payload"
) -> None:
    """``InvalidInput`` naming the first place where ``payload`` breaks ``schema``."""
    if schema is None:
        return
    cls = _validator(schema) or validators.Draft202012Validator
    if bounded():
        # also a schema an operator wrote: a payload from the API is checked in the dialect
        schemadialect.check(schema)
        cls = _spending(cls)
    try:
        # An explicit, empty registry that retrieves nothing: without one the library falls
        # back to fetching remote $refs over HTTP (tests/e2e/test_web_attacks.py).
        validator = cls(schema, registry=Registry())
        error = exceptions.best_match(validator.iter_errors(payload))
    except exceptions.SchemaError as exc:
        raise InvalidInput("payload_schema", _line(exc.message)) from exc
    except InvalidInput:  # over its budget
        raise
    except (Unresolvable, RecursionError, ValueError) as exc:
        # an unresolvable $ref, a pattern Python cannot compile, a self-referencing schema
        raise InvalidInput("payload_schema", f"cannot be applied ({_line(str(exc))})") from exc
    if error is not None:
        where = _where(error)
        raise InvalidInput(
            field_name, f"does not match payload_schema: {where}{_line(error.message)}"
        )


def merge_payload(base: Mapping[str, Any], patch: Mapping[str, Any]) -> dict[str, Any]:
    """``patch`` applied to ``base`` as a JSON Merge Patch (RFC 7386): objects merge key by
    key, a ``null`` removes the key, anything else replaces it."""
    merged = dict(base)
    for key, value in patch.items():
        if value is None:
            merged.pop(key, None)
        elif isinstance(value, Mapping) and isinstance(merged.get(key), Mapping):
            merged[key] = merge_payload(merged[key], value)
        elif isinstance(value, Mapping):
            merged[key] = merge_payload({}, value)
        else:
            merged[key] = value
    return merged


@cache
def _spending(cls: type[Validator]) -> type[Validator]:
    """``cls`` whose every keyword spends the check's budget first, and whose
    ``uniqueItems`` takes linear time."""
    keywords = {name: _spends(check) for name, check in cls.VALIDATORS.items()}
    if "uniqueItems" in keywords:
        keywords["uniqueItems"] = _unique_items
    extended: type[Validator] = validators.extend(cls, keywords)  # type: ignore[no-untyped-call]
    return extended


def _spends(check: Any) -> Any:
    def spending(validator: Validator, value: Any, instance: Any, schema: Any) -> Iterator[Any]:
        spend("payload")
        yield from check(validator, value, instance, schema) or ()

    return spending


def _unique_items(
    validator: Validator, unique: Any, instance: Any, schema: Mapping[str, Any]
) -> Iterator[exceptions.ValidationError]:
    if not unique or not validator.is_type(instance, "array"):
        return
    seen = set()
    for item in instance:
        spend("payload")
        key = json.dumps(_comparable(item), sort_keys=True, ensure_ascii=False)
        if key in seen:
            yield exceptions.ValidationError("has non-unique elements")
            return
        seen.add(key)


def _comparable(value: Any) -> Any:
    """``value`` with the numbers JSON Schema calls equal (1 and 1.0) spelt alike."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, dict):
        return {k: _comparable(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_comparable(v) for v in value]
    return value


def _validator(schema: Mapping[str, Any]) -> type[Validator] | None:
    """The validator of the schema's ``$schema`` (None: one this library does not know), or
    draft 2020-12's when it names none."""
    if "$schema" not in schema:
        return validators.Draft202012Validator
    # validator_for returns `default` for a $schema it does not know (its docs); the stubs
    # accept only a validator class there.
    found: type[Validator] | None = validators.validator_for(schema, default=None)  # type: ignore[arg-type]
    return found


def _where(error: exceptions.ValidationError | exceptions.SchemaError) -> str:
    path = "".join(f"[{p!r}]" if isinstance(p, int) else f".{p}" for p in error.absolute_path)
    return f"at {path[1:] if path.startswith('.') else path}: " if path else ""


def _line(message: str) -> str:
    text = " ".join(message.split())
    return text if len(text) <= _MAX_MESSAGE else text[: _MAX_MESSAGE - 3] + "..."
