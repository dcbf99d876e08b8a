"""Reading request bodies and query cursors: JSON text to Python values, or ``InvalidInput``
naming what is wrong (the API answers 422 with that field).

A body is strict JSON: no ``NaN`` or ``Infinity``, no number that overflows a float or
passes Python's limit on integer digits, no key twice in one object (which of the two
would count is the parser's whim), no objects and lists nested deeper than
``MAX_BODY_DEPTH``, and only the keys a route names when it has a fixed set. Anything else
is one line of 422, never a 500. A large body is parsed in a worker thread, so parsing it
never holds the event loop.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import json
import math
from collections.abc import Collection
from datetime import datetime
from typing import Any

from fastapi import Request

from cluster.errors import InvalidInput
from cluster.jobs.fields import MAX_JSON_DEPTH, too_deep

# What a body may be sent as: JSON, or curl's default for -d (the documented examples).
JSON_TYPES = frozenset({"application/json", "application/x-www-form-urlencoded"})
MIN_YEAR, MAX_YEAR = 1900, 9000
# A payload or schema at its depth limit, inside a job inside a list of jobs.
MAX_BODY_DEPTH = MAX_JSON_DEPTH + 8
_INLINE_BYTES = 64 * 1024  # larger bodies are parsed in a thread


def _no_constant(name: str) -> Any:
    raise InvalidInput("body", f"{name} is not a number JSON allows")


def _finite(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise InvalidInput("body", f"the number {text[:40]} is too large")
    return value


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    found: dict[str, Any] = {}
    for key, value in pairs:
        if key in found:
            raise InvalidInput(key, "appears twice in one object")
        found[key] = value
    return found


def _content_type(request: Request) -> None:
    """A body sent as something other than JSON (a file upload, text) is bad input."""
    given = request.headers.get("content-type")
    if given is None:
        return
    kind = given.split(";")[0].strip().lower()
    if kind not in JSON_TYPES and not kind.endswith("+json"):
        raise InvalidInput("content-type", "send the body as JSON (application/json)")


def parse_json(raw: bytes | str) -> Any:
    """Strict JSON text as Python values; ``InvalidInput`` naming what is wrong."""
    try:
        found = json.loads(
            raw,
            parse_constant=_no_constant,
            parse_float=_finite,
            object_pairs_hook=_unique_keys,
        )
        if too_deep(found, MAX_BODY_DEPTH):
            raise InvalidInput("body", f"nested deeper than {MAX_BODY_DEPTH} levels")
        return found
    except InvalidInput:
        raise
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise InvalidInput("body", f"not valid JSON ({exc})") from exc
    except ValueError as exc:  # an integer past sys.get_int_max_str_digits()
        raise InvalidInput("body", "a number is too large") from exc
    except RecursionError as exc:
        raise InvalidInput("body", "nested too deeply") from exc


# Bounds of free-text query parameters (names are bounded by MAX_NAME_LENGTH): a search
# term or expression longer than any real one is refused (422) before it reaches a query.
MAX_QUERY_LENGTH = 200
MAX_TIME_LENGTH = 64
MAX_CURSOR_LENGTH = 4096  # a cursor carries a (tenant, name) key, JSON-escaped, in base64


async def json_body(request: Request) -> Any:
    _content_type(request)
    raw = await request.body()
    if not raw.strip():
        raise InvalidInput("body", "a JSON body is needed")
    if len(raw) > _INLINE_BYTES:
        return await asyncio.to_thread(parse_json, raw)
    return parse_json(raw)


async def json_object(request: Request, keys: Collection[str] | None = None) -> dict[str, Any]:
    """The body as a JSON object; with ``keys``, one holding no other key."""
    data = await json_body(request)
    if not isinstance(data, dict):
        wanted = "the keys of a job file" if keys is None else ", ".join(sorted(keys))
        raise InvalidInput("body", f"must be a JSON object with {wanted}")
    unknown = sorted(set(data) - set(keys if keys is not None else data))
    if unknown:
        raise InvalidInput(unknown[0], "unknown key")
    return data


def request_body(schema: dict[str, Any]) -> dict[str, Any]:
    """A route's ``openapi_extra`` declaring its required JSON body (FastAPI sees none: the
    routes read the body themselves, for one-line 422s)."""
    return {"requestBody": {"required": True, "content": {"application/json": {"schema": schema}}}}


def iso_time(value: object, field: str) -> datetime:
    """An ISO 8601 time with its offset, from a body's or a query's ``field``; the CLI's
    wording when it is not one."""
    if not isinstance(value, str):
        raise InvalidInput(field, "must be an ISO 8601 time")
    try:
        found = datetime.fromisoformat(value)
    except ValueError as exc:
        raise InvalidInput(field, f"{value!r} is not an ISO 8601 time") from exc
    if found.tzinfo is None:
        raise InvalidInput(field, "needs a UTC offset, e.g. 2026-01-01T00:00:00+00:00")
    if not MIN_YEAR <= found.year <= MAX_YEAR:  # arithmetic on slots near year 1 or 9999 overflows
        raise InvalidInput(field, f"must be between the years {MIN_YEAR} and {MAX_YEAR}")
    return found


def encode_cursor(*parts: Any) -> str:
    text = json.dumps(list(parts), separators=(",", ":"), ensure_ascii=False)
    return base64.urlsafe_b64encode(text.encode()).decode().rstrip("=")


def decode_cursor(cursor: str, arity: int) -> list[Any]:
    """The parts of a cursor made by ``encode_cursor``; ``InvalidInput`` if it is not one."""
    try:
        text = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode()
        parts = json.loads(text)
    except (ValueError, binascii.Error, UnicodeDecodeError) as exc:
        raise InvalidInput("cursor", "not a cursor this API returned") from exc
    if not isinstance(parts, list) or len(parts) != arity:
        raise InvalidInput("cursor", "not a cursor this API returned")
    return parts
