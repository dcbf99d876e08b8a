"""``pulse jobs add`` and ``pulse jobs apply`` with http:, celery: and shell: handlers: every
bad input exits 2 with one line and writes nothing; good ones are stored as references and
shown readably, a broker password masked."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cluster.settings import ClusterSettings
from tests.helpers.cli import Invoke, Shared, assert_bad_input, jobs_rows, spawn

BROKER = "redis://127.0.0.1:6379/14"


def add(name: str, handler: str, *extra: str) -> list[str]:
    return ["jobs", "add", name, "--schedule", "@daily", "--handler", handler, *extra]


BAD_ADD = [
    (["http:FETCH https://example.com/x"], "handler.http.method"),
    (["http:POST ftp://example.com/x"], "handler.http.url"),
    (["http:POST example.com/x"], "handler.http.url"),
    (['http:{"url": "https://e.com", "ok_status": "2xx"}'], "handler.http.ok_status"),
    (['http:{"url": "https://e.com", "ok_status": 700}'], "handler.http.ok_status"),
    (['http:{"url": "https://e.com", "timeout": "10m"}', "--timeout", "1m"], "handler.http"),
    (["celery:"], "handler.celery.task"),
    (["celery: ", "--celery-broker", BROKER], "handler.celery.task"),
    (["celery:app.tasks.rollup"], "handler.celery.broker"),  # no broker anywhere
    (["shell:echo", "--celery-wait"], "celery-broker"),
    (["a.b:c", "--env", "TOKEN"], "env"),
    (["shell:backup", "--env", "PULSE_DATABASE_URL"], "env"),
    (["shell:backup", "--env", "NOT-A-NAME"], "env"),
    (['shell:{"argv": []}'], "handler.shell.argv"),
    (
        ['http:{"url": "https://e.com", "headers": {"Host": "admin.internal"}}'],
        "handler.http.headers",
    ),
    (
        ['http:{"url": "https://e.com", "headers": {"X-Forwarded-For": "10.0.0.1"}}'],
        "handler.http.headers",
    ),
]


@pytest.mark.parametrize(("args", "field"), BAD_ADD, ids=[f"{f}:{a[0][:24]}" for a, f in BAD_ADD])
def test_bad_handlers_are_refused_and_nothing_is_written(
    shared: Shared, args: list[str], field: str
) -> None:
    settings, invoke = shared
    before = jobs_rows(settings)
    assert_bad_input(invoke(*add("h", *args)), field)
    assert jobs_rows(settings) == before


BAD_FILES = [
    "{name: a, schedule: '@daily', handler: {http: {method: FETCH, url: 'https://e.com'}}}",
    "{name: a, schedule: '@daily', handler: {http: {url: 'file:///etc/passwd'}}}",
    "{name: a, schedule: '@daily', handler: {http: {url: 'https://e.com', ok_status: ok}}}",
    "{name: a, schedule: '@daily', handler: {celery: {task: ''}}}",
    "{name: a, schedule: '@daily', handler: {smtp: {to: x}}}",
    "{name: a, schedule: '@daily', handler: {shell: {argv: [], env: [X]}}}",
    "{name: a, schedule: '@daily', handler: {shell: {command: x, env: [PULSE_REDIS_URL]}}}",
]


@pytest.mark.parametrize("entry", BAD_FILES)
def test_bad_handlers_in_a_job_file_apply_nothing(
    shared: Shared, tmp_path: Path, entry: str
) -> None:
    settings, invoke = shared
    before = jobs_rows(settings)
    path = tmp_path / "jobs.yaml"
    path.write_text(f"- {{name: fine, schedule: '@daily', handler: 'a.b:c'}}\n- {entry}\n")
    result = invoke("jobs", "apply", str(path))
    assert_bad_input(result, "file")
    assert "entry 2 (a): handler" in result.stderr
    assert jobs_rows(settings) == before


def test_a_celery_job_without_a_broker_needs_pulse_celery_broker(
    shared: Shared, tmp_path: Path
) -> None:
    settings, invoke = shared
    before = jobs_rows(settings)
    path = tmp_path / "jobs.yaml"
    path.write_text("- {name: c, schedule: '@daily', handler: 'celery:app.tasks.rollup'}\n")
    result = invoke("jobs", "apply", str(path))
    assert_bad_input(result, "file")
    assert "entry 1 (c): handler.celery.broker: no broker" in result.stderr
    assert jobs_rows(settings) == before


def test_good_handlers_are_stored_as_references_and_shown(
    initialised: Invoke, settings: ClusterSettings, tmp_path: Path
) -> None:
    pulse = initialised
    result = pulse(*add("hook", "http:post https://example.com/hook"))
    assert result.exit_code == 0, result.stderr
    result = pulse(
        *add("rollup", "celery:app.tasks.rollup", "--celery-broker", "${env:BROKER_URL}"),
        "--celery-wait",
    )
    assert result.exit_code == 0, result.stderr
    path = tmp_path / "jobs.yaml"
    path.write_text(
        "- name: notify\n"
        "  schedule: '@hourly'\n"
        "  timeout: 30s\n"
        "  handler:\n"
        "    http:\n"
        "      method: PATCH\n"
        "      url: https://example.com/notify\n"
        "      headers: {Authorization: 'Bearer ${env:TOKEN}'}\n"
        "      body: {kind: hourly}\n"
        "      ok_status: [200-299, 409]\n"
        "      timeout: 10s\n"
        "- name: literal\n"
        "  schedule: '@hourly'\n"
        "  handler: {celery: {task: app.tasks.x, broker: 'redis://:hunter2@127.0.0.1:6379/3',"
        " queue: reports}}\n"
    )
    assert pulse("jobs", "apply", str(path)).exit_code == 0
    again = pulse("jobs", "apply", str(path))
    assert "no changes (2 jobs unchanged)" in again.stdout  # the stored text is canonical
    listed = {j["name"]: j["handler"] for j in json.loads(pulse("jobs", "list", "--json").stdout)}
    assert listed["hook"] == "http:POST https://example.com/hook"
    assert json.loads(listed["rollup"].removeprefix("celery:")) == {
        "task": "app.tasks.rollup",
        "broker": "${env:BROKER_URL}",
        "wait": True,
    }
    assert "hunter2" not in json.dumps(listed) and ":***@" in listed["literal"]
    show = pulse("jobs", "show", "notify").stdout
    for line in (
        "handler:          http:PATCH https://example.com/notify",
        "                    header Authorization: Bearer ${env:TOKEN}",
        '                    body {"kind": "hourly"}',
        "                    ok_status 200-299,409",
        "                    timeout 10s",
    ):
        assert line in show.splitlines(), show
    show = spawn(settings, "jobs", "show", "literal").result()
    assert "hunter2" not in show.stdout + show.stderr and "queue reports" in show.stdout
    show = pulse("jobs", "show", "literal", "--json").stdout
    assert "hunter2" not in show


def test_shell_handlers_take_an_env_list_from_the_cli_and_job_files(
    initialised: Invoke, tmp_path: Path
) -> None:
    pulse = initialised
    done = pulse(*add("dump", "shell:pg_dump -f /backups/x", "--env", "PGPASS", "--env", "A"))
    assert done.exit_code == 0, done.stderr
    path = tmp_path / "jobs.yaml"
    path.write_text(
        "- {name: exec, schedule: '@daily', handler: {shell: {argv: [/opt/run, a b], env: [K]}}}\n"
        "- {name: group, schedule: '@daily', handler: 'shell:{ echo a; echo b; }'}\n"
    )
    assert pulse("jobs", "apply", str(path)).exit_code == 0
    listed = {j["name"]: j["handler"] for j in json.loads(pulse("jobs", "list", "--json").stdout)}
    assert listed["dump"] == 'shell:{"command":"pg_dump -f /backups/x","env":["A","PGPASS"]}'
    assert listed["exec"] == 'shell:{"argv":["/opt/run","a b"],"env":["K"]}'
    assert listed["group"] == "shell:{ echo a; echo b; }", "a shell group stays command text"
