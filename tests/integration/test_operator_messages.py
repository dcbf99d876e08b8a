"""What an operator reads when something is refused or fails: one line naming the thing at
fault in the operator's words (never a Python repr or an exception's internals), exit 2 for
bad input with nothing written, and every dropped part of an imported file listed."""

from __future__ import annotations

import json
import socket
from pathlib import Path

import pytest

from cluster.errors import InvalidInput
from cluster.jobs.spec import JobSpec
from cluster.settings import ClusterSettings
from cluster.timing.icsdates import ics_dates
from tests.helpers.cli import Invoke, assert_bad_input, assert_one_line_error, invoke, jobs_rows

H = "shell:true"


def test_a_window_for_a_job_that_does_not_exist_is_bad_input(
    initialised: Invoke, settings: ClusterSettings
) -> None:
    span = ["--from", "2031-01-01T00:00:00Z", "--to", "2031-01-02T00:00:00Z"]
    result = initialised("windows", "add", *span, "--job", "ghost")
    assert_bad_input(result, "job")
    assert "no job 'ghost' in tenant default" in result.stderr
    assert json.loads(initialised("windows", "list", "--json").stdout) == []


@pytest.mark.parametrize(
    ("line", "needle"),
    [
        ("DTSTART;VALUE=DATE:2026-12-24", "DTSTART '2026-12-24' is not a date"),
        ("DTSTART;VALUE=DATE:20261224\nDTEND;VALUE=DATE:soon", "DTEND 'soon' is not a date"),
        (
            "DTSTART;VALUE=DATE:20261224\nRRULE:FREQ=YEARLY;COUNT=2\nEXDATE;VALUE=DATE:xmas",
            "EXDATE 'xmas' is not",
        ),
    ],
)
def test_a_bad_ics_date_names_the_property_not_pythons_types(line: str, needle: str) -> None:
    text = f"BEGIN:VCALENDAR\nBEGIN:VEVENT\nSUMMARY:Holiday\n{line}\nEND:VEVENT\nEND:VCALENDAR\n"
    with pytest.raises(InvalidInput) as caught:
        ics_dates(text)
    message = str(caught.value)
    assert needle in message and "event 'Holiday'" in message
    assert "concatenate" not in message and "operand" not in message


def test_a_file_that_is_not_a_plan_says_so(
    initialised: Invoke, settings: ClusterSettings, tmp_path: Path
) -> None:
    jobs = tmp_path / "jobs.yaml"
    jobs.write_text(f"jobs:\n- name: a\n  schedule: '@hourly'\n  handler: '{H}'\n", "utf-8")
    not_a_plan = tmp_path / "plan.json"
    not_a_plan.write_text('{"digest": "x"}', "utf-8")
    result = initialised("jobs", "apply", str(jobs), "--plan-file", str(not_a_plan))
    assert_bad_input(result, "plan-file")
    assert "is not the output of `pulse jobs apply --plan --json`" in result.stderr
    assert "'jobs'" not in result.stderr
    missing = initialised("jobs", "apply", str(jobs), "--plan-file", str(tmp_path / "none"))
    assert_bad_input(missing, "plan-file")
    assert "cannot read" in missing.stderr
    assert jobs_rows(settings) == []


def test_a_chained_jobs_upstreams_are_named_as_a_list_not_a_tuple() -> None:
    with pytest.raises(InvalidInput) as caught:
        JobSpec.build("c", "@after:a,b", H, after="a")
    assert str(caught.value).endswith("its schedule's: a, b")


def test_a_ping_to_an_unreachable_host_names_the_host_and_not_the_token(
    initialised: Invoke,
) -> None:
    with socket.socket() as sock:  # a port nobody listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    token = "t" * 43
    result = initialised("ping", f"http://127.0.0.1:{port}/api/ping/{token}", "--timeout", "5s")
    assert result.exit_code == 1
    assert_one_line_error(result.stderr, f"127.0.0.1:{port}", "cannot be reached")
    assert token not in result.stderr


def test_k8s_namespace_and_restart_policy_are_listed_as_not_mapped(initialised: Invoke) -> None:
    result = initialised("import", "k8s-cronjob", "tests/imports/cronjobs.yaml")
    assert result.exit_code == 0, result.output
    assert "(nightly-report): namespace reports is not mapped" in result.stderr
    assert "(nightly-report): restartPolicy OnFailure is not mapped" in result.stderr


def test_a_six_field_crontab_line_is_imported_with_a_warning(tmp_path: Path) -> None:
    crontab = tmp_path / "crontab"
    crontab.write_text("0 */5 * * * * /usr/local/bin/tick\n", "utf-8")
    result = invoke({}, "import", "crontab", str(crontab))
    assert result.exit_code == 0, result.output
    assert "line 1: '*' after the five fields looks like a sixth one" in result.stderr
