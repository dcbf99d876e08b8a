"""Loads the named statements of ``cluster/store/sql/*.sql`` once; the store and lock
adapters run them. ``fetch_one`` and ``fetch_all`` run one on a connection, driver errors
becoming ``StoreError``.

Each file holds the statements of one responsibility (jobs, claim, completion, flights, ...).
Sections start with ``-- name: <name>``; everything up to the next section is the statement.
A name is unique across the files: a second definition is an error at load, never a silent
override. Time-dependent statements take ``coalesce(%(now)s, now())`` so tests can drive the
clock.

Comment lines and indentation are left out of the statement sent: psycopg would take a
placeholder (or any ``%``) in a comment for its own, and ``pg_stat_activity`` shows only a
statement's first kilobyte (tests/unit/test_queries.py).

A job's option columns are never listed by hand: ``{fields:LIST:TEMPLATE}`` stands for the
columns of one of the lists the options declare (``cluster.jobs.options.Options.columns``:
``written``, ``timing``, ``claimed``, ``child``, ``child_timing``), each written as TEMPLATE
with ``@`` for the column and joined by commas: ``{fields:claimed:j.@}``,
``{fields:written:@ = excluded.@}``. ``{job_json:ALIAS}`` stands for the select list whose
``row_to_json`` is a job row's object as ``Job.to_json`` makes it (``cluster.jobs.sqljson``),
``{run_json:ALIAS}`` for a run page row's as ``Run.to_json`` makes it.
Expanded once at load, so the statements sent are as if written out
(tests/unit/test_job_options.py).
"""

from __future__ import annotations

import re
from functools import cache
from importlib import resources
from typing import Any

import psycopg

from cluster.errors import Conflict, InvalidInput, PulseError, StoreError
from cluster.jobs.spec import OPTIONS
from cluster.jobs.sqljson import job_json, run_json
from cluster.store.connect import Conn, Row, SchemaMissing, describe

_SECTION = re.compile(r"^-- name: ([a-z_]+)\s*$", re.MULTILINE)
_FIELDS = re.compile(r"\{fields:([a-z_]+):([^{}]+)\}")
_JSON = re.compile(r"\{(job|run)_json:([a-z_]+)\}")


def _sources() -> dict[str, str]:
    """Each file of the folder by name (``claim.sql``), as written."""
    folder = resources.files("cluster.store").joinpath("sql")
    files = (f for f in folder.iterdir() if f.name.endswith(".sql"))
    return {f.name: f.read_text("utf-8") for f in sorted(files, key=lambda f: f.name)}


def _sections(text: str) -> list[tuple[str, str]]:
    """The (name, body as written) of each section of one file, in order."""
    parts = _SECTION.split(text)
    return list(zip(parts[1::2], parts[2::2], strict=True))


@cache
def _all() -> dict[str, bytes]:
    found: dict[str, bytes] = {}
    where: dict[str, str] = {}
    for file, text in _sources().items():
        for name, body in _sections(text):
            if name in where:
                raise RuntimeError(f"statement {name!r} is defined in {where[name]} and {file}")
            where[name] = file
            found[name] = expand(_compact(body)).rstrip(";").encode()
    return found


def expand(text: str) -> str:
    """``text`` with each ``{fields:LIST:TEMPLATE}`` written out (KeyError for an unknown
    list), and each ``{job_json:ALIAS}`` (``{run_json:ALIAS}``): the select list whose
    ``row_to_json`` is the JSON object of the job (run) row ``ALIAS`` (``cluster.jobs.sqljson``)."""
    lists = OPTIONS.columns
    text = _FIELDS.sub(lambda m: ", ".join(m[2].replace("@", c) for c in lists[m[1]]), text)
    return _JSON.sub(lambda m: (job_json if m[1] == "job" else run_json)(m[2]), text)


def _compact(body: str) -> str:
    """The statement without its whole-line comments, blank lines and indentation."""
    lines = (line.strip() for line in body.splitlines())
    return "\n".join(line for line in lines if line and not line.startswith("--"))


def query(name: str) -> bytes:
    """The statement called ``name``; KeyError if there is none."""
    return _all()[name]


@cache
def variant(name: str, flag: str, value: bool) -> bytes:
    """The statement ``name`` with its ``%(flag)s`` parameter written in as a constant.

    A flag that selects a branch of a statement (the claim's ``fair``) is better a constant:
    the planner drops the branch not taken, and each variant keeps a cheap generic plan of
    its own once prepared. As a parameter, the generic plan would carry both branches and
    cost more than the custom plans, so Postgres would plan the statement at every call."""
    return query(name).replace(f"%({flag})s".encode(), b"true" if value else b"false")


def names() -> list[str]:
    return sorted(_all())


QUOTA_CONSTRAINT = "tenant_quota"  # what migration 019's quota checks raise
LIMIT_KEY_CONSTRAINT = "limit_key"  # a job names an unknown key (0.3.0_pre_uses_named_limits)
_COUNTED = frozenset({"max_jobs", "max_backfill_slots"})


def store_error(exc: psycopg.Error, context: str | None = None) -> PulseError:
    """A driver error as Pulse's, after ``context`` (what failed) if given; a missing table
    means ``pulse init`` never ran; a tenant's quota refusing a write is bad input (a cap
    on a count is full: ``Conflict``; a value past a cap: ``InvalidInput``)."""
    if isinstance(exc, psycopg.errors.UndefinedTable):
        return SchemaMissing()
    if isinstance(exc, psycopg.errors.CheckViolation) and (
        exc.diag.constraint_name == QUOTA_CONSTRAINT
    ):
        field = exc.diag.column_name or "tenant"
        problem = exc.diag.message_primary or "past the tenant's quota"
        return Conflict(field, problem) if field in _COUNTED else InvalidInput(field, problem)
    if isinstance(exc, psycopg.errors.CheckViolation) and (
        exc.diag.constraint_name == LIMIT_KEY_CONSTRAINT
    ):
        return InvalidInput("uses", exc.diag.message_primary or "names an unknown key")
    return StoreError(describe(exc) if context is None else f"{context}: {describe(exc)}")


async def fetch_one(conn: Conn, name: str, params: dict[str, Any]) -> Row | None:
    """The first row of statement ``name``, None if none."""
    try:
        cur = await conn.execute(query(name), params)
        return await cur.fetchone()
    except psycopg.Error as exc:
        raise store_error(exc) from exc


async def fetch_all(conn: Conn, name: str, params: dict[str, Any]) -> list[Row]:
    """Every row of statement ``name``."""
    try:
        cur = await conn.execute(query(name), params)
        return await cur.fetchall()
    except psycopg.Error as exc:
        raise store_error(exc) from exc
