"""The stored forms of ``shell:`` handlers, and the split of a command written over the API."""

from __future__ import annotations

import pytest

from cluster.errors import InvalidInput
from cluster.jobs import shellrefs
from cluster.jobs.fields import validate_handler
from cluster.jobs.shellrefs import ShellCommand
from cluster.jobs.spec import JobSpec


def test_command_text_stays_text_and_json_forms_are_canonical() -> None:
    assert shellrefs.canonical("shell: echo hi ") == "shell:echo hi"
    assert shellrefs.parse("shell:{ a; }") == ShellCommand(command="{ a; }"), "a shell group"
    argv = shellrefs.canonical('shell:{"env": ["B", "A", "A"], "argv": ["/bin/echo", "x y"]}')
    assert argv == 'shell:{"argv":["/bin/echo","x y"],"env":["A","B"]}'
    assert shellrefs.canonical('shell:{"command": "echo hi"}') == "shell:echo hi"
    with_env = shellrefs.canonical({"shell": {"command": "echo $A", "env": ["A"]}})
    assert with_env == 'shell:{"command":"echo $A","env":["A"]}'
    # A command that reads as a JSON object keeps its meaning through a round trip.
    odd = ShellCommand(command='{"argv": ["x"]}').encode()
    assert shellrefs.parse(odd) == ShellCommand(command='{"argv": ["x"]}')


@pytest.mark.parametrize(
    ("options", "field"),
    [
        ({"argv": []}, "handler.shell.argv"),
        ({"argv": "echo hi"}, "handler.shell.argv"),
        ({"argv": ["echo", 1]}, "handler.shell.argv"),
        ({"argv": ["a"], "command": "a"}, "handler.shell"),
        ({"command": "a", "env": "HOME"}, "handler.shell.env"),
        ({"command": "a", "env": ["1BAD"]}, "handler.shell.env"),
        ({"command": "a", "env": ["PULSE_DATABASE_URL"]}, "handler.shell.env"),
        ({"command": "a", "shell": True}, "handler.shell.shell"),
    ],
)
def test_bad_mappings_name_the_field(options: dict[str, object], field: str) -> None:
    with pytest.raises(InvalidInput) as caught:
        shellrefs.from_mapping(options)
    assert caught.value.field == field


def test_job_files_and_the_cli_write_every_form() -> None:
    spec = JobSpec.from_mapping(
        {"name": "n", "schedule": "@hourly", "handler": {"shell": {"argv": ["/bin/true"]}}}
    )
    assert spec.handler == 'shell:{"argv":["/bin/true"]}'
    assert validate_handler("shell:backup --all") == "shell:backup --all"
    assert shellrefs.with_env("shell:backup", ["TOKEN"]) == (
        'shell:{"command":"backup","env":["TOKEN"]}'
    )
    with pytest.raises(InvalidInput):
        shellrefs.with_env("billing.jobs:rollup", ["TOKEN"])


@pytest.mark.parametrize(
    "command",
    [
        "/opt/backup/run x; env",
        "/opt/backup/run $(env)",
        "/opt/backup/run `env`",
        "/opt/backup/run x\nenv",
        "/opt/backup/run x && env",
        "/opt/backup/run > /etc/passwd",
        "/opt/backup/run 'x;y'",
        '/opt/backup/run "a\'b"',
        "/opt/backup/run ~root",
        "/opt/backup/run *",
        "/opt/backup/run x\tenv\x07",
        "/opt/backup/run 'unterminated",
    ],
)
def test_shell_syntax_is_refused_over_the_api(command: str) -> None:
    with pytest.raises(InvalidInput) as caught:
        shellrefs.split_for_api(ShellCommand(command=command))
    assert caught.value.field == "handler"


def test_a_plain_command_is_split_into_argv() -> None:
    found = shellrefs.split_for_api(ShellCommand(command="/opt/backup/run 'one-word' -v"))
    assert found == ShellCommand(argv=("/opt/backup/run", "one-word", "-v"))
    assert found.encode() == 'shell:{"argv":["/opt/backup/run","one-word","-v"]}'


@pytest.mark.parametrize(
    "argv",
    [("/opt/backup/run", ""), ("/opt/backup/run", " "), ("/opt/backup/run", "two words")],
    ids=["empty", "blank", "spaces"],
)
def test_an_api_argv_token_is_one_non_empty_word(argv: tuple[str, ...]) -> None:
    with pytest.raises(InvalidInput) as caught:
        shellrefs.split_for_api(ShellCommand(argv=argv))
    assert caught.value.field == "handler"
    with pytest.raises(InvalidInput):
        shellrefs.split_for_api(ShellCommand(command="/opt/backup/run 'two words'"))
