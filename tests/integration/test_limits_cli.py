"""``pulse limits`` and ``--uses`` on the command line (docs/limits.md): keys set, listed and
removed; a job's keys written and shown; bad input one line, exit 2, nothing written; a
key in use refused removal; a job file's ``uses``."""

from __future__ import annotations

import json
from pathlib import Path

from tests.helpers.cli import Invoke


def test_keys_are_set_listed_used_and_removed(initialised: Invoke) -> None:
    made = initialised("limits", "set", "warehouse", "--max-concurrent", "2")
    assert made.exit_code == 0 and made.output == "key warehouse: at most 2 at once (0 running)\n"
    both = initialised(
        "limits", "set", "api", "--rate", "100/min", "--max-concurrent", "5", "--tenant", "acme"
    )
    assert both.output == "key api (tenant acme): at most 5 at once, at most 100/min (0 running)\n"
    added = initialised(
        "jobs", "add", "export", "--schedule", "@daily", "--handler", "shell:true",
        "--uses", "warehouse,api", "--tenant", "acme",
    )  # fmt: skip
    assert added.exit_code == 0, added.output
    shown = json.loads(initialised("jobs", "show", "export", "--tenant", "acme", "--json").output)
    assert shown["uses"] == ["api", "warehouse"] and shown["key_wait"] is None
    text = initialised("jobs", "show", "export", "--tenant", "acme").output
    assert "waiting:          -" in text
    listed = json.loads(initialised("limits", "list", "--json").output)
    assert [(k["key"], k["tenant"], k["max_concurrent"], k["rate"]) for k in listed] == [
        ("api", "acme", 5, "100/min"),
        ("warehouse", None, 2, None),
    ]
    refused = initialised("limits", "remove", "warehouse")
    assert refused.exit_code == 2 and len(refused.output.strip().splitlines()) == 1
    assert "used by 1 job(s): acme/export" in refused.output
    assert initialised("jobs", "remove", "export", "--tenant", "acme").exit_code == 0
    assert initialised("limits", "remove", "warehouse").exit_code == 0
    assert initialised("limits", "remove", "api", "--tenant", "acme").exit_code == 0
    assert initialised("limits", "list").output == "no limit keys\n"


def test_bad_input_is_one_line_exit_2_and_writes_nothing(initialised: Invoke) -> None:
    assert (
        initialised("limits", "set", "mine", "--max-concurrent", "1", "--tenant", "b").exit_code
        == 0
    )
    for args in (
        ["limits", "set", "k", "--rate", "0/min"],
        ["limits", "set", "k", "--rate", "100/day"],
        ["limits", "set", "k", "--rate", "lots"],
        ["limits", "set", "k", "--max-concurrent", "0"],
        ["limits", "set", "k"],
        ["jobs", "add", "j", "--schedule", "@daily", "--handler", "shell:true", "--uses", "nope"],
        ["jobs", "add", "j", "--schedule", "@daily", "--handler", "shell:true", "--uses", "mine",
         "--tenant", "a"],
    ):  # fmt: skip
        result = initialised(*args)
        assert result.exit_code == 2, (args, result.output)
        assert len(result.output.strip().splitlines()) == 1, result.output
    missing = initialised("limits", "remove", "nobody")  # not found: exit 1, as for a job
    assert missing.exit_code == 1 and missing.output == "pulse: no limit key 'nobody'\n"
    listed = json.loads(initialised("limits", "list", "--json").output)
    assert [k["key"] for k in listed] == ["mine"]
    assert initialised("jobs", "list", "--json").output.strip() == "[]"


def test_a_job_file_names_its_keys(initialised: Invoke, tmp_path: Path) -> None:
    assert initialised("limits", "set", "partner-api", "--rate", "6/10s").exit_code == 0
    jobs = tmp_path / "jobs.yaml"
    jobs.write_text(
        "jobs:\n  - name: sync\n    schedule: '@hourly'\n    handler: shell:true\n"
        "    uses: [partner-api]\n"
    )
    applied = initialised("jobs", "apply", str(jobs))
    assert applied.exit_code == 0, applied.output
    shown = json.loads(initialised("jobs", "show", "sync", "--json").output)
    assert shown["uses"] == ["partner-api"]
    jobs.write_text(jobs.read_text().replace("partner-api", "missing"))
    refused = initialised("jobs", "apply", str(jobs))
    assert refused.exit_code == 2 and "no limit key 'missing'" in refused.output
