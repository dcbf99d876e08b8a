"""``--assert 'rows > 0 and errors == 0'``: checks of a run's metrics, and the metric names
themselves (``ctx.metric``, the shell's metrics file), pure.

The grammar is small on purpose, and read by a hand-written parser, never ``eval``: a
metric name, a comparison (``< <= > >= == !=``) and a number make a check; checks combine
with ``and`` and ``or`` (``and`` binds tighter) and parentheses. A check of a metric the
run did not report fails (tests/unit/test_assertions.py).
"""

from __future__ import annotations

import functools
import math
import operator
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from cluster.errors import InvalidInput

MAX_ASSERT_CHARS = 500
MAX_CHECKS = 20
MAX_NESTING = 16  # parentheses inside one another (the parser recurses on each)
MAX_METRICS = 32  # per run
MAX_NAME_CHARS = 64
METRIC_NAME = re.compile(r"[a-z_][a-z0-9_.]{0,63}")
_TOKEN = re.compile(
    r"\s*(?:(?P<number>-?[0-9]+(?:\.[0-9]+)?(?:e[+-]?[0-9]+)?)|(?P<op><=|>=|==|!=|<|>)"
    r"|(?P<paren>[()])|(?P<word>[A-Za-z_][A-Za-z0-9_.\-]*)|(?P<bad>\S))"
)
_OPS: dict[str, Callable[[float, float], bool]] = {
    "<": operator.lt,
    "<=": operator.le,
    ">": operator.gt,
    ">=": operator.ge,
    "==": operator.eq,
    "!=": operator.ne,
}


def metric_name(name: object, field_name: str = "metric") -> str:
    """A metric name: lowercase letters, digits, ``_`` and ``.``, at most 64 characters,
    not starting with a digit or a dot."""
    if not isinstance(name, str) or METRIC_NAME.fullmatch(name) is None:
        raise InvalidInput(
            field_name,
            f"{name!r} is not a metric name (lowercase letters, digits, _ and ., "
            f"at most {MAX_NAME_CHARS} characters, not starting with a digit)",
        )
    return name


def metric_value(value: object, name: str) -> float:
    """A finite number (``bool`` is not one)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise InvalidInput("metric", f"{name}: {value!r} is not a number")
    number = float(value)
    if not math.isfinite(number):
        raise InvalidInput("metric", f"{name}: {value!r} is not a finite number")
    return number


@dataclass(frozen=True)
class Check:
    name: str
    op: str
    value: float

    def text(self) -> str:
        return f"{self.name} {self.op} {self.value:g}"

    def failure(self, metrics: Mapping[str, float]) -> str | None:
        found = metrics.get(self.name)
        if found is None:
            return f"{self.text()} ({self.name} not reported)"
        if _OPS[self.op](found, self.value):
            return None
        return f"{self.text()} ({self.name}={found:g})"


@dataclass(frozen=True)
class Either:
    """``kind`` ``and`` or ``or`` over two or more parts."""

    kind: str
    parts: tuple[Node, ...]

    def text(self) -> str:
        return f" {self.kind} ".join(
            f"({p.text()})" if isinstance(p, Either) else p.text() for p in self.parts
        )

    def failure(self, metrics: Mapping[str, float]) -> str | None:
        failures = [p.failure(metrics) for p in self.parts]
        if self.kind == "and":
            return next((f for f in failures if f is not None), None)
        if all(f is not None for f in failures):
            return " and ".join(f for f in failures if f is not None)
        return None


Node = Check | Either


class _Parser:
    def __init__(self, text: str) -> None:
        self.tokens: list[tuple[str, str]] = []
        for found in _TOKEN.finditer(text):
            kind = found.lastgroup
            if kind is None:
                continue
            value = found[kind]
            if kind == "bad":
                raise InvalidInput("assert", f"unexpected {value!r} in {text!r}")
            if kind == "word" and value in ("and", "or"):
                kind = value
            self.tokens.append((kind, value))
        self.at = 0
        self.checks = 0
        self.depth = 0
        self.text = text

    def peek(self) -> tuple[str, str] | None:
        return self.tokens[self.at] if self.at < len(self.tokens) else None

    def take(self, kind: str, what: str) -> str:
        found = self.peek()
        if found is None or found[0] != kind:
            seen = "the end" if found is None else repr(found[1])
            raise InvalidInput("assert", f"expected {what} but found {seen} in {self.text!r}")
        self.at += 1
        return found[1]

    def either(self, kind: str, inner: Callable[[], Node]) -> Node:
        parts = [inner()]
        while (found := self.peek()) is not None and found[0] == kind:
            self.at += 1
            parts.append(inner())
        return parts[0] if len(parts) == 1 else Either(kind, tuple(parts))

    def any_of(self) -> Node:
        return self.either("or", self.all_of)

    def all_of(self) -> Node:
        return self.either("and", self.term)

    def term(self) -> Node:
        found = self.peek()
        if found is not None and found == ("paren", "("):
            self.at += 1
            self.depth += 1
            if self.depth > MAX_NESTING:
                raise InvalidInput("assert", f"more than {MAX_NESTING} parentheses nested")
            inner = self.any_of()
            self.take("paren", "')'")
            self.depth -= 1
            return inner
        name = metric_name(self.take("word", "a metric name"), "assert")
        op = self.take("op", "a comparison (< <= > >= == !=)")
        value = float(self.take("number", "a number"))
        if not math.isfinite(value):
            raise InvalidInput("assert", f"{value!r} is not a finite number")
        self.checks += 1
        if self.checks > MAX_CHECKS:
            raise InvalidInput("assert", f"at most {MAX_CHECKS} comparisons")
        return Check(name, op, value)


@functools.lru_cache(maxsize=1024)
def parse_assert(text: str) -> Node:
    """The checks of ``text``; ``InvalidInput("assert", ...)`` naming what is wrong."""
    if not isinstance(text, str) or not text.strip():
        raise InvalidInput("assert", "is empty; write checks like 'rows > 0 and errors == 0'")
    if len(text) > MAX_ASSERT_CHARS:
        raise InvalidInput("assert", f"is longer than {MAX_ASSERT_CHARS} characters")
    parser = _Parser(text)
    node = parser.any_of()
    if parser.peek() is not None:
        raise InvalidInput("assert", f"unexpected {parser.peek()[1]!r} in {text!r}")  # type: ignore[index]
    return node


def normalized(text: object) -> str | None:
    """The canonical text of an ``--assert`` (None stays None)."""
    if text is None:
        return None
    if not isinstance(text, str):
        raise InvalidInput("assert", "must be text like 'rows > 0'")
    return parse_assert(text).text()


def failure(text: str, metrics: Mapping[str, float]) -> str | None:
    """Why ``metrics`` fail the checks of ``text`` (a stored, valid ``--assert``), or None."""
    return parse_assert(text).failure(metrics)
