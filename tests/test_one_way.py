"""One way of each thing, read from the source of ``cluster``, ``node``, ``ring`` and
``pulsecron``: a fact is written in one module and imported everywhere else.

- The epoch and the microsecond live in ``cluster.timing.instants``.
- A default (``DEFAULT_GRACE_S``) is not given the same value in two modules.
"""

from __future__ import annotations

import ast
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PACKAGES = ("cluster", "node", "ring", "pulsecron")
INSTANTS = REPO / "cluster" / "timing" / "instants.py"


def sources() -> Iterator[tuple[Path, ast.Module]]:
    for package in PACKAGES:
        for path in sorted((REPO / package).rglob("*.py")):
            yield path, ast.parse(path.read_text("utf-8"), str(path))


def where(path: Path, node: ast.AST) -> str:
    return f"{path.relative_to(REPO)}:{getattr(node, 'lineno', 0)}"


def restated_instants(tree: ast.Module) -> Iterator[ast.Call]:
    """``timedelta(microseconds=1)`` and ``datetime(1970, 1, 1, ...)``."""
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Name):
            continue
        args = [a.value for a in node.args if isinstance(a, ast.Constant)]
        keywords = {k.arg: getattr(k.value, "value", None) for k in node.keywords}
        one_us = node.func.id == "timedelta" and keywords == {"microseconds": 1} and not args
        if one_us or (node.func.id == "datetime" and args[:3] == [1970, 1, 1]):
            yield node


def test_the_epoch_and_the_microsecond_are_written_once() -> None:
    found = [
        f"{where(path, call)}: {ast.unparse(call)}; import it from cluster.timing.instants"
        for path, tree in sources()
        if path != INSTANTS
        for call in restated_instants(tree)
    ]
    assert not found, "\n".join(found)


def defaults(tree: ast.Module) -> Iterator[tuple[str, ast.expr]]:
    """Module-level ``DEFAULT_NAME = value``."""
    for node in tree.body:
        if isinstance(node, ast.Assign):
            targets, value = node.targets, node.value
        elif isinstance(node, ast.AnnAssign) and node.value is not None:
            targets, value = [node.target], node.value
        else:
            continue
        for target in targets:
            if isinstance(target, ast.Name) and target.id.startswith("DEFAULT_"):
                yield target.id, value


def test_a_default_is_given_its_value_in_one_module() -> None:
    seen: defaultdict[tuple[str, str], list[str]] = defaultdict(list)
    for path, tree in sources():
        for name, value in defaults(tree):
            seen[(name, ast.unparse(value))].append(where(path, value))
    found = [
        f"{name} = {value} in {', '.join(places)}: keep one, import it in the others"
        for (name, value), places in sorted(seen.items())
        if len(places) > 1
    ]
    assert not found, "\n".join(found)


def test_the_checks_see_what_they_look_for() -> None:
    bad = ast.parse(
        "from datetime import UTC, datetime, timedelta\n"
        "A = timedelta(microseconds=1)\n"
        "B = datetime(1970, 1, 1, tzinfo=UTC)\n"
        "C = timedelta(microseconds=10)\n"
    )
    assert [ast.unparse(c) for c in restated_instants(bad)] == [
        "timedelta(microseconds=1)",
        "datetime(1970, 1, 1, tzinfo=UTC)",
    ]
    source = "DEFAULT_A = 1\nB = 2\nDEFAULT_C: int = 3\ndef f():\n  DEFAULT_D = 4"
    found = defaults(ast.parse(source))
    assert [name for name, _ in found] == ["DEFAULT_A", "DEFAULT_C"]
