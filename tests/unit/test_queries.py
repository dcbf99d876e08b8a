"""The statements: each name defined once across ``cluster/store/sql/*.sql`` and run by some
code; as sent, without comment lines, placeholders intact; the run history written in one
place."""

from __future__ import annotations

import ast
import re
from collections import Counter
from pathlib import Path

import pytest

from cluster.store import queries
from cluster.store.queries import _sections, _sources, expand, names, query

REPO = Path(__file__).resolve().parents[2]
PLACEHOLDER = re.compile(rb"%\([a-z_]+\)s")


def test_every_file_holds_named_statements_only() -> None:
    files = _sources()
    assert "claim.sql" in files and "jobs.sql" in files
    for file, text in files.items():
        assert _sections(text), file
        # Before the first section only the file's header comment: no statement lost there.
        head = text.split("-- name: ", 1)[0]
        assert all(x.startswith("--") for x in head.splitlines() if x.strip()), file


def test_statement_names_are_unique_across_the_files() -> None:
    defined = Counter(name for text in _sources().values() for name, _ in _sections(text))
    assert [name for name, n in defined.items() if n > 1] == []
    assert sorted(defined) == names()


def test_a_name_defined_twice_is_an_error_at_load(monkeypatch: pytest.MonkeyPatch) -> None:
    twice = {"a.sql": "-- name: ping\nSELECT 1;\n", "b.sql": "-- name: ping\nSELECT 2;\n"}
    monkeypatch.setattr(queries, "_sources", lambda: twice)
    with pytest.raises(RuntimeError, match=r"'ping' is defined in a\.sql and b\.sql"):
        queries._all.__wrapped__()


def _statement_references() -> set[str]:
    """Every string literal of the Python sources of cluster/, node/ and bench/ that could
    name a statement: dict keys and subscripts (``row["db_now"]``) are column names, so they
    do not count. Statements are named by literals (``query("claim")``, ``variant("claim",
    ...)``, ``self._run("renew", ...)``, a tuple of names in a loop); none is built."""
    found: set[str] = set()
    for tree in ("cluster", "node", "bench"):
        for path in (REPO / tree).rglob("*.py"):
            module = ast.parse(path.read_text("utf-8"), str(path))
            keys = {id(n.slice) for n in ast.walk(module) if isinstance(n, ast.Subscript)}
            for node in ast.walk(module):
                if isinstance(node, ast.Dict):
                    keys.update(id(k) for k in node.keys if k is not None)
            found.update(
                node.value
                for node in ast.walk(module)
                if isinstance(node, ast.Constant)
                and isinstance(node.value, str)
                and id(node) not in keys
            )
    return found


def test_every_statement_is_named_by_the_code_that_runs_it() -> None:
    referenced = _statement_references()
    assert [name for name in names() if name not in referenced] == []


def test_statements_are_sent_without_comment_lines_or_indentation() -> None:
    for name in names():
        lines = query(name).split(b"\n")
        assert lines, name
        assert not [x for x in lines if x.lstrip().startswith(b"--")], name
        assert not [x for x in lines if x != x.strip() or not x], name


def test_compacting_keeps_every_placeholder_of_the_statement_itself() -> None:
    for text in _sources().values():
        for name, source in _sections(text):
            code = "\n".join(x for x in source.splitlines() if not x.strip().startswith("--"))
            assert sorted(PLACEHOLDER.findall(query(name))) == sorted(
                PLACEHOLDER.findall(expand(code).encode())
            ), name


UPSERT = re.compile(
    r"INSERT INTO runs AS r \(([^)]*)\).*?ON CONFLICT \(job_id, scheduled_for\) DO UPDATE SET"
    r"(.*?)(?:\)\s*,|\$\$)",
    re.S,
)


def _upsert(text: str) -> tuple[list[str], list[str]]:
    """The columns an upsert into runs writes, and those its conflict branch sets."""
    match = UPSERT.search(text)
    assert match is not None
    sets = [x.split("=")[0].strip() for x in match.group(2).split(",") if x.strip()]
    return [c.strip() for c in match.group(1).split(",")], sets


def test_the_run_row_of_an_ended_attempt_is_written_as_record_run_writes_it() -> None:
    """complete, release and recover call record_run (migration 005); the one statement with
    an upsert of its own, complete's for the jobs that feed nothing, writes the columns of
    record_run's latest definition (tests/integration/test_run_row_paths.py)."""
    for name in ("complete", "release", "recover"):
        assert b"record_run(" in query(name), name
    upserts = [n for n in names() if b"ON CONFLICT (job_id, scheduled_for) DO UPDATE" in query(n)]
    assert upserts == ["complete"]
    schema = Path(queries.__file__).parent / "schema" / "schema.sql"
    defined = schema.read_text().split("CREATE FUNCTION record_run(")[1:]
    (latest,) = [d for d in defined if "run_revision integer" in d.split("$$")[0]]
    assert _upsert(query("complete").decode()) == _upsert(latest)
