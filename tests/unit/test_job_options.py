"""A job's options are declared once (``JobSpec``'s fields, cluster/jobs/spec.py): the lists
written elsewhere agree with the declaration. The statements that expand them
(``{fields:...}``) are checked as sent, so a list edited by hand beside or instead of its
expansion fails here; so does the revision function or trigger of the schema
(``schema.sql``, which tests/integration/test_schema.py keeps equal to the migrations), the
claimed job's fields, the job files' keys and the read model's JSON."""

from __future__ import annotations

import re
from importlib import resources

import pytest

from cluster.errors import InvalidInput
from cluster.jobs.models import Job
from cluster.jobs.spec import OPTIONS, JobSpec
from cluster.store.lock.records import ClaimedJob
from cluster.store.queries import query

WRITTEN = OPTIONS.columns["written"]
CLAIMED = OPTIONS.columns["claimed"]
CHILD = OPTIONS.columns["child"]
# What a claimed job carries before its options (the slot and its lease) and after them.
SLOT_FIELDS = 9
# What a revision records beyond the options: when `jobs adopt` hands a watch job to Pulse,
# and the time a `pause --until` holds the job to (the audit reads it).
RECORDED_STATE = {"adopt_at", "paused_until"}
_COMPARED = re.compile(
    r"\(((?:(\w+)\.\w+,\s*)*\w+\.\w+)\)\s*IS DISTINCT FROM\s*\(((?:\w+\.\w+,\s*)*\w+\.\w+)\)"
)


def statement(name: str) -> str:
    return query(name).decode()


def split_top(text: str) -> list[str]:
    """The comma-separated items of ``text`` that are not inside parentheses, stripped."""
    items, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        depth += (ch == "(") - (ch == ")")
        if ch == "," and depth == 0:
            items.append(text[start:i].strip())
            start = i + 1
    items.append(text[start:].strip())
    return items


def output_names(select_list: str) -> list[str]:
    """The column name of each item of a select list (``x AS n``: n, ``j.c``: c)."""
    names = []
    for item in split_top(select_list):
        found = re.search(r"\bAS (\w+)$", item) or re.fullmatch(r"(?:\w+\.)?(\w+)", item)
        names.append(found[1] if found else item)
    return names


def returning(sql: str) -> list[str]:
    """The output names of the first RETURNING list whose items start with ``j.id``, up to
    where its parenthesis (a CTE's) or the statement closes."""
    start = sql.index("RETURNING j.id") + len("RETURNING ")
    depth = 0
    for i in range(start, len(sql)):
        depth += (sql[i] == "(") - (sql[i] == ")")
        if depth < 0:
            return output_names(sql[start:i])
    return output_names(sql[start:])


def compared(sql: str) -> list[tuple[list[str], list[str]]]:
    """Each ``(a.x, ...) IS DISTINCT FROM (b.x, ...)``: the columns of both sides."""
    return [
        (re.findall(r"\w+\.(\w+)", m[1]), re.findall(r"\w+\.(\w+)", m[3]))
        for m in _COMPARED.finditer(sql)
    ]


def assigned(sql: str) -> list[str]:
    """The columns set from the row that was to be inserted (``c = excluded.c``)."""
    return re.findall(r"(?<![.\w])(\w+) = excluded\.\1\b", sql)


def inserted(sql: str) -> list[str]:
    found = re.search(r"INSERT INTO jobs AS j \(([^)]*)\)", sql)
    assert found is not None
    return [c.strip() for c in found[1].split(",")]


def test_the_claimed_job_carries_the_claimed_options_in_their_order() -> None:
    options = ClaimedJob._fields[SLOT_FIELDS : SLOT_FIELDS + len(CLAIMED)]
    assert options == tuple(d.name for d in OPTIONS if d.option.claimed)
    assert "payload" in ClaimedJob._fields[:SLOT_FIELDS]  # not a column as stored: a claim's


@pytest.mark.parametrize("name", ["claim", "claim_flights", "recover", "recover_flights"])
def test_each_claim_returns_the_claimed_job_with_the_declared_options(name: str) -> None:
    names = returning(statement(name))
    extra = {"recover": 5, "recover_flights": 5}.get(name, 0)  # poison, reason, lost by...
    assert len(names) == len(ClaimedJob._fields) + extra, names
    assert names[SLOT_FIELDS : SLOT_FIELDS + len(CLAIMED)] == list(CLAIMED)
    assert names[3] == "payload"


def test_upsert_jobs_writes_and_compares_the_written_options() -> None:
    sql = statement("upsert_jobs")
    fixed = ["id", "tenant_id", "name", "status", "shard_id", "next_run_at", "slot_at"]
    assert inserted(sql) == [*fixed, "calendar_rule", "slot_origin", "timing_from", *WRITTEN]
    assert assigned(sql) == [*WRITTEN, "calendar_rule"]
    timing = OPTIONS.columns["timing"]
    moved, written = (list(timing), list(timing)), (list(WRITTEN), list(WRITTEN))
    # The slot, timing_from, a running slot's timing_slot, the row.
    assert compared(sql) == [moved, moved, moved, written]
    # Each column inserted is read from the batch's row of that name (x.<column>).
    select = sql[sql.index("SELECT") : sql.index("FROM jsonb_populate_recordset")]
    read = set(re.findall(r"\bx\.(\w+)", select))
    read_too = {"calendar_rule", "slot_origin", "timing_from", "paused"}
    assert read == {*fixed, *read_too, *WRITTEN} - {"status"}
    assert set(re.findall(r"%\((\w+)\)s", sql)) == {"jobs", "replace"}


def test_an_each_zone_child_copies_the_declared_options() -> None:
    sql = statement("upsert_zone_child")
    fixed = ["id", "tenant_id", "name", "status", "shard_id", "next_run_at", "slot_at"]
    assert inserted(sql) == [*fixed, "zones", "parent_id", "timing_from", "paused_until", *CHILD]
    copied = ", ".join(f"p.{c}" for c in CHILD)
    flat = " ".join(sql.split())
    assert f"p.id, p.timing_from, p.paused_until, {copied} FROM jobs p" in flat
    assert assigned(sql) == [*CHILD, "timing_from"]
    timing = OPTIONS.columns["child_timing"]
    moved = (list(timing), list(timing))
    # The slot, a running child's timing_slot, the row.
    assert compared(sql) == [moved, moved, (list(CHILD), list(CHILD))]


def _schema() -> str:
    return resources.files("cluster.store.schema").joinpath("schema.sql").read_text("utf-8")


def test_a_revision_records_every_declared_option() -> None:
    text = _schema()
    body = text[text.index("CREATE FUNCTION job_definition(j jobs)") :]
    body, _, edges = body[: body.index("$$;")].partition("|| (SELECT")
    keys = re.findall(r"'(\w+)',", body)
    columns = re.findall(r"\bj\.(\w+)", body)
    recorded = {str(d.column) for d in OPTIONS.recorded}
    # The upstreams are not columns: they come from job_edges, after the options.
    assert re.findall(r"'(\w+)',", edges) == ["after", "after_match"]
    assert sorted(columns) == sorted(recorded | RECORDED_STATE)
    # Each under its name (before migration 030: its column), once.
    assert len(keys) == len(set(keys)) == len(columns)
    assert [d.name for d in OPTIONS.recorded if d.name not in keys and d.column not in keys] == []


def test_the_revision_trigger_watches_every_recorded_column() -> None:
    text = _schema()
    trigger = text[text.index("CREATE TRIGGER jobs_revision_updated") :]
    trigger = trigger[: trigger.index("EXECUTE FUNCTION")]
    of = re.search(r"BEFORE UPDATE OF\s+(.*?)\s+ON jobs", trigger, re.DOTALL)
    assert of is not None
    # `paused` has a trigger of its own (a completion sets it alone: migration 029), which
    # watches `paused_until` too.
    paused = {"paused", "paused_until"}
    expected = sorted(({str(d.column) for d in OPTIONS.recorded} | RECORDED_STATE) - paused)
    assert sorted(c.strip() for c in of[1].split(",")) == expected
    assert sorted(re.findall(r"\bOLD\.(\w+)", trigger)) == expected
    assert sorted(re.findall(r"\bNEW\.(\w+)", trigger)) == sorted([*expected, "parent_id"])


def test_every_option_is_a_job_file_key_and_nothing_else_is() -> None:
    base = {"name": "j", "schedule": "@hourly", "handler": "m:f"}
    assert JobSpec.from_mapping(base).validated() == JobSpec.from_mapping(base)
    with pytest.raises(InvalidInput) as caught:
        JobSpec.from_mapping({**base, "grace_s": 5})  # the JSON key of a duration is not one
    assert (caught.value.field, caught.value.problem) == ("grace_s", "unknown key")
    with pytest.raises(InvalidInput, match="give assert or asserts, not both"):
        JobSpec.from_mapping({**base, "assert": "rows > 0", "asserts": "rows > 1"})
    assert JobSpec.from_mapping({**base, "assert": "rows > 0"}).asserts == "rows > 0"


def test_the_read_model_shows_each_option_under_its_name() -> None:
    shown = {d.name for d in OPTIONS.read}
    assert shown <= {f for f in Job.__dataclass_fields__}
    assert not shown & {d.name for d in OPTIONS if not d.option.read}
