"""One way of each thing, read from the source of ``cluster``, ``node``, ``ring`` and
``pulsecron``: a fact is written in one module and imported everywhere else.

- The epoch and the microsecond live in ``cluster.timing.instants``.
- A default (``DEFAULT_GRACE_S``) is not given the same value in two modules.
- A status is compared as its enum's member (``RunStatus``, ``JobStatus``,
  ``DeliveryStatus``), never as a string literal, in Python and in the console's script;
  each enum is the schema's ``CHECK`` list.
"""

from __future__ import annotations

import ast
import re
from collections import defaultdict
from collections.abc import Iterator
from enum import StrEnum
from pathlib import Path

import pytest

from cluster.jobs.models import JobStatus, RunStatus
from cluster.store.housekeeping.alerts import DeliveryStatus

REPO = Path(__file__).resolve().parents[1]
PACKAGES = ("cluster", "node", "ring", "pulsecron")
INSTANTS = REPO / "cluster" / "timing" / "instants.py"
SCHEMA = REPO / "cluster" / "store" / "schema" / "schema.sql"
CONSOLE = REPO / "cluster" / "web" / "static"
STATUS_ENUMS: tuple[type[StrEnum], ...] = (RunStatus, JobStatus, DeliveryStatus)
STATUS_WORDS = frozenset(s.value for enum in STATUS_ENUMS for s in enum)


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


def literals(node: ast.expr) -> list[str]:
    """The strings of a string constant, or of a tuple, list or set of them; else none."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return [node.value]
    if isinstance(node, ast.Tuple | ast.List | ast.Set):
        found = [literals(e) for e in node.elts]
        if all(found):
            return [s for strings in found for s in strings]
    return []


def status_literals(tree: ast.Module) -> Iterator[ast.Compare]:
    """Comparisons of a status (an expression naming ``status`` or ``outcome``) with a
    status word written as a literal."""
    for node in ast.walk(tree):
        if not isinstance(node, ast.Compare):
            continue
        sides = [node.left, *node.comparators]
        words = [side for side in sides if STATUS_WORDS & set(literals(side))]
        named = [ast.unparse(s) for s in sides if s not in words]
        if words and any("status" in text or "outcome" in text for text in named):
            yield node


def test_statuses_are_compared_as_enum_members() -> None:
    found = [
        f"{where(path, node)}: {ast.unparse(node)}"
        for path, tree in sources()
        for node in status_literals(tree)
    ]
    assert not found, "use RunStatus, JobStatus or DeliveryStatus:\n" + "\n".join(found)


JS_STATUS = re.compile(r"""[=!]==\s*["'](\w+)["']|["'](\w+)["']\s*[=!]==""")


def test_the_console_takes_its_statuses_from_the_api() -> None:
    found = [
        f"{path.relative_to(REPO)}:{number}: {line.strip()}"
        for path in sorted(CONSOLE.glob("*.js"))
        for number, line in enumerate(path.read_text("utf-8").splitlines(), 1)
        if any(STATUS_WORDS & set(match.groups()) for match in JS_STATUS.finditer(line))
        or re.search(r'\[""(, "\w+")+\]', line)  # a hand-written list of statuses
    ]
    assert not found, "use JOB_STATUS and RUN_STATUS (/console/statuses.js):\n" + "\n".join(found)


@pytest.mark.parametrize("enum", STATUS_ENUMS)
def test_each_status_enum_is_the_schemas_check(enum: type[StrEnum]) -> None:
    checks = re.findall(r"CHECK \(status IN \(([^)]*)\)\)", SCHEMA.read_text("utf-8"))
    lists = [set(re.findall(r"'(\w+)'", check)) for check in checks]
    assert {s.value for s in enum} in lists, f"{enum.__name__} differs from the schema's CHECK"


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
    compared = ast.parse(
        "a = job.status == 'idle'\nb = row['status'] in ('paused', 'done')\n"
        "c = outcome != 'failed'\nd = kind == 'done'\ne = job.status == JobStatus.IDLE\n"
    )
    assert [ast.unparse(c.left) for c in status_literals(compared)] == [
        "job.status",
        "row['status']",
        "outcome",
    ]
    source = "DEFAULT_A = 1\nB = 2\nDEFAULT_C: int = 3\ndef f():\n  DEFAULT_D = 4"
    found = defaults(ast.parse(source))
    assert [name for name, _ in found] == ["DEFAULT_A", "DEFAULT_C"]
