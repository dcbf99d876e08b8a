"""The JSON Schema dialect the HTTP API accepts in ``payload_schema``, and applies payloads
against: JSON Schema whose cost of checking is bounded by the size of the payload.

A schema written over the API is data from a token, checked by ``pulse web`` on its own
process, so it may not hold what makes checking slow (docs/design/inputs.md):

- ``$ref`` only to ``#/$defs/NAME`` (or ``#/definitions/NAME``), never in a cycle, and the
  schema with every reference written out in place holds at most ``MAX_SUBSCHEMAS``
  subschemas: fifteen levels of ``anyOf`` over two references would be 2^15;
- at most ``MAX_DEPTH`` subschemas nested in one another;
- ``uniqueItems`` only beside a ``maxItems`` of at most ``MAX_UNIQUE_ITEMS``;
- no ``pattern`` or ``patternProperties`` (Python's regular expressions backtrack), no
  dynamic or recursive references, anchors or ``$id`` below the root.

``check`` raises ``InvalidInput`` naming ``payload_schema`` and the place that breaks a rule.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from typing import Any

from cluster.errors import InvalidInput

__all__ = ["MAX_DEPTH", "MAX_SUBSCHEMAS", "MAX_UNIQUE_ITEMS", "check"]

MAX_DEPTH = 32
MAX_SUBSCHEMAS = 512
MAX_UNIQUE_ITEMS = 1000
FIELD = "payload_schema"

# Keywords whose value is one subschema, a list of them, or a map of names to them.
_ONE = ("not", "if", "then", "else", "additionalItems", "contains", "additionalProperties",
        "propertyNames", "unevaluatedItems", "unevaluatedProperties", "contentSchema")  # fmt: skip
_LIST = ("allOf", "anyOf", "oneOf", "prefixItems")
_MAP = ("properties", "$defs", "definitions", "dependentSchemas")
_REFUSED = {
    "pattern": "pattern is refused over the API (a regular expression can take exponential time)",
    "patternProperties": "patternProperties is refused over the API (regular expressions)",
    "$dynamicRef": "dynamic references are refused over the API",
    "$dynamicAnchor": "dynamic anchors are refused over the API",
    "$recursiveRef": "recursive references are refused over the API",
    "$recursiveAnchor": "recursive anchors are refused over the API",
    "$anchor": "anchors are refused over the API: use $ref to #/$defs/NAME",
}
_DEFS = ("$defs", "definitions")
_DEF_NAME = re.compile(r"^[A-Za-z0-9_.-]{1,100}$")


def check(schema: object) -> None:
    """``InvalidInput`` unless ``schema`` is in the API's dialect."""
    if not isinstance(schema, Mapping):
        raise InvalidInput(FIELD, "must be a JSON object")
    defs = {f"#/{where}/{name}": value for where in _DEFS for name, value in _items(schema, where)}
    for ref in defs:
        if not _DEF_NAME.match(ref.rpartition("/")[2]):
            raise InvalidInput(
                FIELD, f"{_short(ref)}: name definitions with letters, digits, _ . -"
            )
    for count, (place, node, depth) in enumerate(_walk(schema, "", 0), 1):
        if count > MAX_SUBSCHEMAS:
            raise InvalidInput(FIELD, f"holds more than {MAX_SUBSCHEMAS} subschemas")
        if depth > MAX_DEPTH:
            raise InvalidInput(FIELD, f"at {place or '/'}: nested deeper than {MAX_DEPTH} levels")
        if isinstance(node, Mapping):
            _check_node(place, node, depth, defs)
    try:
        _expanded_size(schema, defs)
    except RecursionError as exc:
        raise InvalidInput(FIELD, "its $refs are chained too deeply") from exc


def _check_node(place: str, node: Mapping[str, Any], depth: int, defs: Mapping[str, Any]) -> None:
    where = f"at {place or '/'}: "
    for keyword, problem in _REFUSED.items():
        if keyword in node:
            raise InvalidInput(FIELD, where + problem)
    if "$id" in node and depth > 0:
        raise InvalidInput(FIELD, where + "$id is refused below the root over the API")
    ref = node.get("$ref")
    if "$ref" in node and (not isinstance(ref, str) or ref not in defs):
        raise InvalidInput(
            FIELD, where + f"$ref must be one of the schema's own #/$defs/NAME, not {_short(ref)}"
        )
    if node.get("uniqueItems") is True:
        most = node.get("maxItems")
        if not isinstance(most, int) or isinstance(most, bool) or most > MAX_UNIQUE_ITEMS:
            problem = f"uniqueItems needs a maxItems of at most {MAX_UNIQUE_ITEMS} beside it"
            raise InvalidInput(FIELD, where + problem)


def _walk(node: object, place: str, depth: int) -> Iterator[tuple[str, object, int]]:
    """Every subschema with its JSON pointer and depth, the root first (iterative: the
    depth is what is being checked)."""
    stack = [(place, node, depth)]
    while stack:
        place, node, depth = stack.pop()
        yield place, node, depth
        if not isinstance(node, Mapping) or depth > MAX_DEPTH:
            continue
        stack.extend((f"{place}/{k}", child, depth + 1) for k, child in _children(node))


def _children(node: Mapping[str, Any]) -> Iterator[tuple[str, object]]:
    for keyword in _ONE:
        if keyword in node:
            yield keyword, node[keyword]
    for keyword in _LIST:
        for position, child in enumerate(_list(node, keyword)):
            yield f"{keyword}/{position}", child
    items = node.get("items")
    if isinstance(items, list):  # drafts before 2020-12: a schema per position
        for position, child in enumerate(items):
            yield f"items/{position}", child
    elif items is not None:
        yield "items", items
    for keyword in _MAP:
        for name, child in _items(node, keyword):
            yield f"{keyword}/{name}", child
    for name, child in _items(node, "dependencies"):
        if isinstance(child, Mapping | bool):  # else a list of property names
            yield f"dependencies/{name}", child


def _expanded_size(schema: Mapping[str, Any], defs: Mapping[str, Any]) -> None:
    """Refuse a cycle of references, and a schema whose references written out in place
    would hold more than ``MAX_SUBSCHEMAS`` subschemas (counted once per definition)."""
    sizes: dict[str, int] = {}
    visiting: set[str] = set()

    def size_of(node: object, inside: str | None) -> int:
        total = 1
        if isinstance(node, Mapping):
            ref = node.get("$ref")
            if isinstance(ref, str):
                total += size_of_ref(ref)
            for keyword, child in _children(node):
                if inside is None and keyword.split("/")[0] in _DEFS:
                    continue  # a definition counts where it is used
                total += size_of(child, inside)
                if total > MAX_SUBSCHEMAS:
                    break
        return min(total, MAX_SUBSCHEMAS + 1)

    def size_of_ref(ref: str) -> int:
        if ref in visiting:
            raise InvalidInput(FIELD, f"$ref {_short(ref)} refers to itself (a cycle)")
        if ref not in sizes:
            visiting.add(ref)
            sizes[ref] = size_of(defs[ref], ref)
            visiting.discard(ref)
        return sizes[ref]

    for ref in defs:
        size_of_ref(ref)
    if size_of(schema, None) > MAX_SUBSCHEMAS:
        raise InvalidInput(
            FIELD, f"holds more than {MAX_SUBSCHEMAS} subschemas with its $refs written out"
        )


def _items(node: Mapping[str, Any], keyword: str) -> list[tuple[str, object]]:
    value = node.get(keyword)
    return list(value.items()) if isinstance(value, Mapping) else []


def _list(node: Mapping[str, Any], keyword: str) -> list[object]:
    value = node.get(keyword)
    return list(value) if isinstance(value, list) else []


def _short(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."
