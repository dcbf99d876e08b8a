"""A job's and a run's JSON written by the statement itself: the SQL select lists that turn a
``jobs`` row into a row whose ``row_to_json`` is the object ``Job.to_json`` makes
(docs/json.md), for the pages of ``GET /api/jobs``, and a run page's row into
``Run.to_json``'s, for those of ``GET /api/runs``.

A page of 100 jobs spent more time in Python (``Job.from_row``, seven ``isoformat`` calls
and the masking per job, ``json.dumps``) than its statement took; built by Postgres, the
page reaches the HTTP layer as one text (docs/design/web.md, "What a page costs").

The expression is derived from the same declarations as the model, never listed by hand:
the options ``Job`` carries (``OPTIONS.read``), each rendered by its type in ``Job`` (a
float keeps its ``.0``, a list is an array, a JSON column shows ``not_shown`` past the depth
cap), then the state fields. ``tests/integration/test_job_json.py`` compares both
renderings on jobs that set every option, so the two cannot drift. The handler is masked by
``job_handler_shown``, the database's copy of ``cluster.jobs.masking``, when it holds a word
a secret's name contains or an ``@`` (no rule masks anything else): its five patterns cost
more than the rest of a job's JSON.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from functools import cache

from cluster.jobs import masking
from cluster.jobs.fields import MAX_JSON_DEPTH
from cluster.jobs.models import NEVER_DUE, Job
from cluster.jobs.spec import OPTIONS
from cluster.timing.entries import PREFIX
from cluster.timing.schedule import CHAINED_NEXT

__all__ = ["job_json", "run_json"]

_FLOAT_EXACT = 1e15  # below it Python writes an integral float as digits and ".0"
_NOT_SHOWN = f"nested deeper than {MAX_JSON_DEPTH} levels"
# A container nested deeper than the cap (cluster.jobs.fields.too_deep): the root is at
# level 0 and depth 1.
_TOO_DEEP = (
    f'\'strict $.**{{{MAX_JSON_DEPTH} to last}} ? (@.type() == "object" || @.type() == "array")\''
)


def _iso(column: str) -> str:
    """A timestamptz as ``datetime.isoformat`` writes an aware UTC one (microseconds only
    when there are some)."""
    text = f"to_char({column} AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.US')"
    return f"replace({text}, '.000000', '') || '+00:00'"


def _shown_iso(column: str) -> str:
    """``iso(shown(...))``: null for the far-future markers (``cluster.jobs.models.shown``)."""
    marker = CHAINED_NEXT.strftime("%Y-%m-%d %H:%M:%S+00")
    return f"CASE WHEN {column} < '{marker}'::timestamptz THEN {_iso(column)} END"


def _float(column: str) -> str:
    """A double as Python's ``json.dumps`` writes a float (``60.0``, not ``60``), as json."""
    return (
        f"(CASE WHEN {column} = trunc({column}) AND abs({column}) < {_FLOAT_EXACT:.0f} "
        f"THEN trunc({column})::bigint::text || '.0' ELSE {column}::text END)::json"
    )


def _capped(column: str) -> str:
    """A JSON column as shown: ``{"not_shown": ...}`` when nested past the cap."""
    return (
        f"CASE WHEN jsonb_path_exists({column}, {_TOO_DEEP}) "
        f"THEN jsonb_build_object('not_shown', '{_NOT_SHOWN}') ELSE {column} END"
    )


def _option(name: str, column: str, jsonb: bool, kind: str, default: object) -> str:
    if name == "handler":  # literal credentials masked (cluster.jobs.masking)
        could_hold = f"strpos({column}, '@') > 0 OR {column} ~* '{masking.WORD}'"
        return f"CASE WHEN {could_hold} THEN job_handler_shown({column}) ELSE {column} END"
    if name == "zones":  # no zones: null
        return f"CASE WHEN cardinality({column}) > 0 THEN to_json({column}) END"
    if kind.startswith("tuple"):
        return f"coalesce(to_json({column}), '[]'::json)"
    if jsonb:
        found = _capped(column)
        return f"coalesce({found}, '{{}}'::jsonb)" if isinstance(default, dict) else found
    if kind.startswith("float"):
        return _float(column)
    return column


def _schedules(j: str) -> str:
    """The entries of a job with several schedules (``Entry.to_json`` of each: schedule,
    then payload, start and end when set), null for one schedule."""
    e = "e.value"
    entry = (
        f"('{{\"schedule\": ' || ({e} -> 'schedule')::text"
        f" || CASE WHEN json_typeof({e} -> 'payload') = 'object'"
        f" AND ({e} -> 'payload')::text NOT IN ('{{}}', '{{ }}')"
        f" THEN ', \"payload\": ' || ({e} -> 'payload')::text ELSE '' END"
        f" || coalesce(', \"start\": ' || ({e} -> 'start')::text, '')"
        f" || coalesce(', \"end\": ' || ({e} -> 'end')::text, '') || '}}')::json"
    )
    entries = (
        f"(SELECT json_agg({entry} ORDER BY e.ordinality) FROM json_array_elements("
        f"substr({j}.schedule, {len(PREFIX) + 1})::json) WITH ORDINALITY AS e)"
    )
    return f"CASE WHEN starts_with({j}.schedule, '{PREFIX}') THEN {entries} END"


def _pairs(j: str) -> Iterator[tuple[str, str]]:
    """(key, SQL expression of its JSON value) in ``Job.to_json``'s order."""
    kinds = {f.name: str(f.type) for f in dataclasses.fields(Job)}
    yield "id", f"{j}.id::text"
    for d in OPTIONS.read:
        yield d.name, _option(d.name, f"{j}.{d.column}", d.option.jsonb, kinds[d.name], d.default)
    never = ", ".join(f"'{s}'" for s in sorted(NEVER_DUE))
    next_run = f"CASE WHEN {j}.status NOT IN ({never}) THEN {j}.next_run_at END"
    yield from [
        ("status", f"{j}.status"),
        ("shard", f"{j}.shard_id"),
        ("next_run_at", _shown_iso(next_run)),
        ("slot_at", _shown_iso(f"{j}.slot_at")),
        ("attempt", f"{j}.attempt"),
        ("last_run_at", _iso(f"{j}.last_run_at")),
        ("locked_by", f"{j}.locked_by"),
        ("lease_expires_at", _iso(f"{j}.lease_expires_at")),
        ("failed_slots", f"{j}.failed_slots"),
        ("pause_note", f"{j}.pause_note"),
        ("cancel_by", f"{j}.cancel_by"),
        ("paused_until", _iso(f"{j}.paused_until")),
        ("revision", f"{j}.revision"),
        ("schedules", _schedules(j)),
        ("runs_done", f"{j}.runs_done"),
    ]
    health = [
        ("last_success", _iso(f"{j}.last_success_at")),
        ("next_slot", _shown_iso(next_run)),
        ("state", f"{j}.expect_state"),
        ("state_at", _iso(f"{j}.expect_state_at")),
    ]
    yield "health", _object(health)
    yield from [
        ("adopt_at", _iso(f"{j}.adopt_at")),
        ("created_at", _iso(f"{j}.created_at")),
        ("updated_at", _iso(f"{j}.updated_at")),
    ]


def _object(pairs: list[tuple[str, str]]) -> str:
    """``json_build_object`` of a few ``pairs`` (a ``json`` value)."""
    return "json_build_object(" + ", ".join(f"'{key}', {value}" for key, value in pairs) + ")"


@cache
def job_json(j: str) -> str:
    """The select list whose row is the JSON object of the ``jobs`` row aliased ``j``: each
    key's value named after it, in order, for ``row_to_json`` (which takes any number of
    columns, and cost less than ``json_build_object`` of as many)."""
    return ", ".join(f'{value} AS "{key}"' for key, value in _pairs(j))


# ``Run.to_json``'s keys in order, each with its column of a run page's row and how it is
# rendered (``tests/integration/test_run_json.py`` compares both renderings).
_RUN = (
    ("id", "id", None),
    ("job_id", "job_id", "text"),
    ("tenant", "tenant_id", None),
    ("job", "job_name", None),
    ("scheduled_for", "scheduled_for", "iso"),
    ("attempt", "attempt", None),
    ("node_id", "node_id", None),
    ("zone", "zone", None),
    ("status", "status", None),
    ("started_at", "started_at", "iso"),
    ("finished_at", "finished_at", "iso"),
    ("duration_s", "duration_s", "float"),
    ("error", "last_error", None),
    ("origin", "origin", None),
    ("revision", "revision", None),
)


@cache
def run_json(r: str) -> str:
    """The select list whose row is the JSON object of the run page's row aliased ``r``
    (the columns ``Run.from_row`` reads), as ``Run.to_json`` makes it."""
    shown = {None: lambda c: c, "text": lambda c: f"{c}::text", "iso": _iso, "float": _float}
    return ", ".join(f'{shown[how](f"{r}.{column}")} AS "{key}"' for key, column, how in _RUN)
