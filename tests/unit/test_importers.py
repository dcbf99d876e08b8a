"""The importers' parsing, pure: crontab lines of every kind, Celery crontab fields as cron
ranges, CronJob documents that are refused, and names made unique with the prefix."""

from __future__ import annotations

import pytest

from cluster.errors import InvalidInput
from cluster.importers.beat import _ranges
from cluster.importers.cronjobs import import_cronjobs
from cluster.importers.crontabs import import_crontab
from cluster.importers.imported import Options


def crontab(text: str, **options: object) -> tuple[list[dict[str, object]], list[str]]:
    result = import_crontab(text, "t", Options(**options))  # type: ignore[arg-type]
    return result.jobs, result.problems


def test_macros_quotes_escapes_and_shells() -> None:
    jobs, problems = crontab(
        'GREETING="hello world"\n'
        "SHELL=/bin/bash\n"
        "@annually /bin/yearly\n"
        "0 1 * * * printf '\\%s' x\n"
        "@sometimes /bin/x\n"
        "* * * run\n"
        "TZ=Mars/Olympus\n"
        "0 2 * * * /bin/late\n"
    )
    assert [(j["name"], j["schedule"]) for j in jobs] == [
        ("yearly", "@yearly"),
        ("printf", "0 1 * * *"),
    ]
    assert jobs[1]["handler"] == "shell:export GREETING='hello world'; printf '%s' x"
    assert problems[0] == "line 2: SHELL=/bin/bash: not mapped, Pulse runs commands with /bin/sh"
    assert problems[1] == "line 5: @sometimes: not a cron macro"
    assert problems[2] == "line 6: not a schedule line (five fields and a command)"
    assert problems[3].startswith("line 8: not imported: tz:")


def test_names_are_unique_and_prefixed() -> None:
    jobs, _ = crontab("* * * * * /bin/a\n* * * * * /bin/a --again\n", prefix="old-")
    assert [j["name"] for j in jobs] == ["old-a", "old-a-2"]


def test_the_tenant_is_checked() -> None:
    with pytest.raises(InvalidInput, match=r"^tenant:"):
        crontab("* * * * * /bin/a\n", tenant="")


@pytest.mark.parametrize(
    ("values", "low", "high", "expected"),
    [
        ({0, 15, 30, 45}, 0, 59, "0,15,30,45"),
        (set(range(9, 18)), 0, 23, "9-17"),
        (set(range(0, 24)), 0, 23, "*"),
        ({1, 2, 3, 5, 7, 8}, 0, 6, "1-3,5,7-8"),
        ({4}, 1, 12, "4"),
    ],
)
def test_celery_fields_as_cron_ranges(values: set[int], low: int, high: int, expected: str) -> None:
    assert _ranges(values, low, high) == expected


def test_cronjobs_refused_with_their_reason() -> None:
    text = """
apiVersion: batch/v1beta1
kind: CronJob
metadata: {name: old}
spec: {schedule: "* * * * *"}
---
apiVersion: batch/v1
kind: CronJob
metadata: {name: two}
spec:
  schedule: "* * * * *"
  jobTemplate: {spec: {template: {spec: {containers: [{name: a, command: [x]}, {name: b}]}}}}
---
apiVersion: batch/v1
kind: CronJob
metadata: {name: odd}
spec:
  schedule: "TZ=Asia/Tokyo 0 9 * * *"
  concurrencyPolicy: Sometimes
  jobTemplate: {spec: {template: {spec: {containers: [{name: a, command: [x]}]}}}}
"""
    result = import_cronjobs(text, "t", Options())
    assert result.jobs == []
    assert result.problems == [
        "document 1 (old): not imported: apiVersion batch/v1beta1, not batch/v1",
        "document 2 (two): not imported: 2 containers; Pulse runs one command",
        "document 3 (odd): not imported: concurrencyPolicy 'Sometimes' is not Allow, Forbid "
        "or Replace",
    ]


def test_a_manifest_that_is_not_yaml_is_bad_input() -> None:
    with pytest.raises(InvalidInput, match=r"^file: t is not valid YAML"):
        import_cronjobs("a: [", "t", Options())


def test_a_system_crontab_line_is_refused_unless_system() -> None:
    line = "17 * * * * root cd / && run-parts --report /etc/cron.hourly\n"
    jobs, problems = crontab(line)
    assert jobs == []
    assert problems == [
        "line 1: not imported: 'root' looks like the user field of a system crontab "
        "(/etc/crontab, /etc/cron.d); import it with --system"
    ]
    result = import_crontab(line, "t", Options(), system=True)
    assert [j["handler"] for j in result.jobs] == [
        "shell:cd / && run-parts --report /etc/cron.hourly"
    ]
    assert result.problems == ["line 1: user root: not mapped, the node's user runs it"]
