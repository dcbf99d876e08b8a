"""docs/json.md names the keys the other commands print ("Other commands", and the watch
job's ping URL): each command runs in-process against a fresh cluster (no node), and the
keys of what it prints are compared with the list the page gives after the words quoted
below. (The job and run tables are tests/test_docs.py's.)"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from cluster.settings import ClusterSettings
from tests.helpers import REPO
from tests.helpers.cli import initialised_pulse

pytestmark = pytest.mark.timeout(60)

JOBS = """\
jobs:
  - {name: a, schedule: '@every 1m', handler: 'm:f'}
  - {name: b, schedule: '@after:a', handler: 'm:f'}
"""
CLOSING = {"(": ")", "{": "}", "[": "]"}


def page_text() -> str:
    """docs/json.md without backticks, on one line."""
    return " ".join((REPO / "docs" / "json.md").read_text("utf-8").replace("`", "").split())


def documented(after: str) -> list[str]:
    """The keys listed right after ``after``: a ``{key, key (what it is), ...}`` object, or
    a list of keys up to the next ``;`` or ``.`` outside parentheses (``each with id, ...``)."""
    text = page_text()
    assert text.count(after) == 1, f"docs/json.md does not say {after!r} once"
    rest = text.split(after, 1)[1].lstrip()
    braced = rest.startswith("{")
    depth, item, items = 0, "", []
    for char in rest[1:] if braced else rest:
        if depth == 0 and (char == "}" if braced else char in ";."):
            break
        if char in CLOSING:
            depth += 1
        elif char in CLOSING.values():
            depth -= 1
        if depth == 0 and char == ",":
            items.append(item)
            item = ""
        else:
            item += char
    items.append(item)
    return [re.match(r"\s*(?:and\s+)?(\w+)", i).group(1) for i in items]  # type: ignore[union-attr]


def keys(value: Any) -> list[str]:
    return list(value[0] if isinstance(value, list) else value)


def test_the_other_commands_print_the_keys_json_md_lists(
    settings: ClusterSettings, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pulse = initialised_pulse(settings)
    monkeypatch.chdir(tmp_path)
    (tmp_path / "jobs.yaml").write_text(JOBS, encoding="utf-8")

    def printed(*args: str) -> Any:
        result = pulse(*args, "--json")
        assert result.exit_code == 0, result.output
        return json.loads(result.stdout)

    plan = printed("jobs", "apply", "jobs.yaml", "--plan")
    assert keys(plan) == documented("pulse jobs apply --plan --json prints")
    assert keys(plan["jobs"]) == documented("each job")
    assert keys(printed("jobs", "apply", "jobs.yaml")) == documented(
        "pulse jobs apply --json prints"
    )
    history = printed("jobs", "history", "a")
    assert keys(history) == documented("pulse jobs history --json prints")
    assert keys(history["revisions"]) == documented("revisions}, each")
    trigger = printed("jobs", "trigger", "a", "--payload", '{"x": 1}')
    assert keys(trigger) == documented("it queued:")
    span = ("--from", "2026-01-01T00:00:00Z", "--to", "2026-01-01T00:03:00Z")
    backfill = printed("jobs", "backfill", "a", *span)
    assert keys(backfill) == keys(printed("backfills", "list")) == documented("each with")
    assert keys(printed("jobs", "backfill", "a", *span, "--dry-run")) == ["slots"]
    window = ("--job", "a", "--from", "2027-01-01T00:00:00Z", "--to", "2027-01-02T00:00:00Z")
    added = printed("windows", "add", *window)
    listed = documented("a list of blackout windows with")
    assert keys(printed("windows", "list")) == listed and keys(added) == [*listed, "replanned"]
    assert pulse("tenants", "set", "a-team", "--max-concurrent", "3").exit_code == 0
    assert keys(printed("tenants", "list")) == documented("tenants list --json prints a list of")
    assert pulse("tenants", "quota", "default", "--max-jobs", "10").exit_code == 0
    quotas = documented("GET /api/tenants/quotas) prints a list of")
    assert keys(printed("tenants", "quotas")) == quotas
    assert pulse("alerts", "add", "ops", "--webhook", "https://hooks.example.com/x").exit_code == 0
    assert keys(printed("alerts", "list")) == documented("alerts list --json prints a list of")
    watch = printed("jobs", "add", "w", "--watch", "--schedule", "@hourly")
    assert "ping_url" in watch
    assert keys(printed("jobs", "ping-url", "w", "--rotate")) == documented(
        "--rotate --json prints"
    )
