"""The statements as sent: without comment lines, placeholders intact, short enough for
psycopg to cache their placeholder conversion; the run history written in one place."""

from __future__ import annotations

import re
from importlib import resources

from cluster.store.queries import _SECTION, names, query

# psycopg converts ``%(name)s`` placeholders of a longer statement afresh on every call
# (psycopg._queries.MAX_CACHED_STATEMENT_LENGTH).
PSYCOPG_CACHED_BYTES = 4096
PLACEHOLDER = re.compile(rb"%\([a-z_]+\)s")


def _sources() -> dict[str, str]:
    text = resources.files("cluster.store").joinpath("queries.sql").read_text("utf-8")
    parts = _SECTION.split(text)
    return dict(zip(parts[1::2], parts[2::2], strict=True))


def test_statements_are_sent_without_comment_lines_or_indentation() -> None:
    for name in names():
        lines = query(name).split(b"\n")
        assert lines, name
        assert not [x for x in lines if x.lstrip().startswith(b"--")], name
        assert not [x for x in lines if x != x.strip() or not x], name


def test_compacting_keeps_every_placeholder_of_the_statement_itself() -> None:
    for name, source in _sources().items():
        code = "\n".join(x for x in source.splitlines() if not x.strip().startswith("--"))
        assert sorted(PLACEHOLDER.findall(query(name))) == sorted(
            PLACEHOLDER.findall(code.encode())
        ), name


def test_every_statement_is_short_enough_for_psycopg_to_cache() -> None:
    too_long = {n: len(query(n)) for n in names() if len(query(n)) > PSYCOPG_CACHED_BYTES}
    assert not too_long


def test_the_run_row_of_an_ended_attempt_is_written_in_one_place() -> None:
    """complete, release and recover call record_run (migration 005); no statement keeps an
    upsert of its own into runs."""
    for name in ("complete", "release", "recover"):
        assert b"record_run(" in query(name), name
    assert not [n for n in names() if b"ON CONFLICT (job_id, scheduled_for) DO UPDATE" in query(n)]
