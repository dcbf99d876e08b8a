"""A job's inputs: its ``payload_schema`` (a JSON Schema), payloads checked against it, and
the merge of ``pulse jobs trigger --merge-payload``.

The schema is checked by whoever writes a payload (``jobs add``, ``jobs apply``, the API,
the Python API, ``jobs trigger``), never by a node: a fire costs nothing more. The
``jsonschema`` library does the work; Pulse bounds the schema's size and never fetches a
remote ``$ref``: validators get an empty registry, which retrieves nothing (without one, the
library would fetch a remote ``$ref`` over HTTP); only references inside the schema resolve. Why so:
docs/design/inputs.md.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from jsonschema import exceptions, validators
from jsonschema.protocols import Validator
from referencing import Registry
from referencing.exceptions import Unresolvable

from cluster.errors import InvalidInput
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
    try:
        # An explicit, empty registry that retrieves nothing: without one the library falls
        # back to fetching remote $refs over HTTP (tests/e2e/test_web_attacks.py).
        validator = cls(schema, registry=Registry())
        error = exceptions.best_match(validator.iter_errors(payload))
    except exceptions.SchemaError as exc:
        raise InvalidInput("payload_schema", _line(exc.message)) from exc
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
