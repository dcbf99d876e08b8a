"""The test suite's own rules, read from its source: a test module imports what it shares
from ``tests.helpers`` (or ``tests.registries``), never from another test module or a
conftest; and async code awaits ``until`` (``tests/helpers/waiting.py``), which otherwise
would hand back a coroutine that never runs."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

from tests.helpers.scheduling import WHOLE_MODULES, WholeModules, slow_modules_first

TESTS = Path(__file__).resolve().parent
SOURCES = sorted(p for p in TESTS.rglob("*.py") if "__pycache__" not in p.parts)


def _name(path: Path) -> str:
    return path.relative_to(TESTS.parent).with_suffix("").as_posix().replace("/", ".")


def imported(tree: ast.Module) -> Iterator[tuple[int, str]]:
    """(line, module) of every import, ``from a import b`` counted as ``a.b`` too."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            yield from ((node.lineno, alias.name) for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            yield node.lineno, node.module
            yield from ((node.lineno, f"{node.module}.{alias.name}") for alias in node.names)


def is_test_module(module: str) -> bool:
    parts = module.split(".")
    return parts[0] == "tests" and (parts[-1].startswith("test_") or parts[-1] == "conftest")


def test_no_module_imports_a_test_module_or_a_conftest() -> None:
    found = [
        f"{_name(path)}:{line} imports {module}"
        for path in SOURCES
        for line, module in imported(ast.parse(path.read_text("utf-8")))
        if is_test_module(module)
    ]
    assert found == [], "move what is shared to tests/helpers/"


def unawaited_until(tree: ast.Module) -> Iterator[int]:
    """Lines where code of an ``async def`` calls ``until`` without awaiting it."""

    def visit(node: ast.AST, in_async: bool, awaited: bool) -> Iterator[int]:
        if isinstance(node, ast.AsyncFunctionDef):
            in_async = True
        elif isinstance(node, ast.FunctionDef | ast.Lambda):
            in_async = False
        called = isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id
        if called == "until" and in_async and not awaited:
            yield node.lineno
        for child in ast.iter_child_nodes(node):
            yield from visit(child, in_async, isinstance(node, ast.Await))

    yield from visit(tree, False, False)


def test_async_code_awaits_until() -> None:
    found = [
        f"{_name(path)}:{line}"
        for path in SOURCES
        for line in unawaited_until(ast.parse(path.read_text("utf-8")))
    ]
    assert found == []


def test_the_checks_see_what_they_look_for() -> None:
    tree = ast.parse(
        "from tests.integration.test_cli import x\n"
        "from tests.integration import test_history\n"
        "import tests.conftest\n"
        "async def f():\n    until(p, 'w')\n    await until(p, 'w')\n"
        "    def g():\n        until(p, 'w')\n"
    )
    assert [m for _, m in imported(tree) if is_test_module(m)] == [
        "tests.integration.test_cli",
        "tests.integration.test_history",
        "tests.conftest",
    ]
    assert list(unawaited_until(tree)) == [5]


def test_the_tiers_run_on_workers_and_the_fast_one_leaves_out_e2e() -> None:
    full = (TESTS.parent / "bin" / "test").read_text("utf-8")
    fast = (TESTS.parent / "bin" / "test-fast").read_text("utf-8")
    assert 'exec .venv/bin/pytest -n 4 "$@"' in full
    assert 'exec .venv/bin/pytest -n 4 -m "not e2e" "$@"' in fast


class _Item:
    def __init__(self, nodeid: str, slow: bool = False) -> None:
        self.nodeid, self.slow = nodeid, slow

    def get_closest_marker(self, name: str) -> object:
        return "slow" if name == "slow" and self.slow else None


def test_modules_with_a_slow_test_run_first_whole_and_in_their_order() -> None:
    items = [
        _Item("tests/e2e/test_a.py::one"),
        _Item("tests/e2e/test_b.py::quick"),
        _Item("tests/e2e/test_b.py::long", slow=True),
        _Item("tests/e2e/test_b.py::also_quick"),
        _Item("tests/unit/test_c.py::one"),
        _Item("tests/unit/test_d.py::long", slow=True),
    ]
    slow_modules_first(items)  # type: ignore[arg-type]
    assert [i.nodeid.rsplit("/", 1)[1] for i in items] == [
        "test_b.py::quick",
        "test_b.py::long",
        "test_b.py::also_quick",
        "test_d.py::long",
        "test_a.py::one",
        "test_c.py::one",
    ]


def test_the_whole_modules_exist_and_are_one_unit_each() -> None:
    for module in WHOLE_MODULES:
        assert (TESTS.parent / module).is_file(), module
    split = WholeModules._split_scope
    plan = "tests/integration/test_claim_plan.py"
    assert split(None, f"{plan}::test_a") == split(None, f"{plan}::test_b[x]") == plan  # type: ignore[arg-type]
    assert split(None, "tests/unit/test_c.py::test_a") == "tests/unit/test_c.py::test_a"  # type: ignore[arg-type]


def test_every_end_to_end_module_marks_its_tests_e2e() -> None:
    """bin/test-fast leaves out the ``e2e`` mark, not the directory: a module of node
    processes without it would slow the fast tier."""
    unmarked = [
        path.name
        for path in sorted((TESTS / "e2e").glob("test_*.py"))
        if "pytest.mark.e2e" not in path.read_text("utf-8")
    ]
    assert unmarked == []
