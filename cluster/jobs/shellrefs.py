"""The stored form of ``shell:`` handlers, and how a shell job written over the HTTP API is
turned into one that runs without a shell (docs/design/api-handlers.md).

Three forms, stored as text in ``jobs.handler`` like ``http:{...}`` (``handlerrefs``):

- ``shell:<command>``: the operator's text, run by ``/bin/sh -c``;
- ``shell:{"argv": [...], "env": [...]}``: run with exec, no shell;
- ``shell:{"command": "...", "env": [...]}``: shell text with an env list.

``env`` names the node's variables the process gets; every shell run gets only those, the
run's ``PULSE_*`` variables and a few basics (``node.handlers.shell``). JSON forms are
canonical compact JSON (sorted keys, an empty ``env`` left out); a command text that
starts with ``{`` but is not a JSON object stays command text (``{ a; }`` is valid sh).
"""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from cluster.errors import InvalidInput

SHELL = "shell:"
_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
# What a shell would read as more than a word; refused in every argv token from the API.
METACHARACTERS = frozenset(";|&$`<>(){}*?[]~!#'\"\\")
# Variables Pulse sets for the run itself: never taken from the node's environment.
RESERVED_PREFIX = "PULSE_"


@dataclass(frozen=True)
class ShellCommand:
    """Exactly one of ``argv`` (exec) and ``command`` (``/bin/sh -c``) is set."""

    argv: tuple[str, ...] | None = None
    command: str | None = None
    env: tuple[str, ...] = ()

    def encode(self) -> str:
        if self.argv is not None:
            return SHELL + _compact({"argv": list(self.argv), **self._env()})
        assert self.command is not None
        if self.env or _reads_as_json(self.command):
            return SHELL + _compact({"command": self.command, **self._env()})
        return SHELL + self.command

    def _env(self) -> dict[str, Any]:
        return {"env": list(self.env)} if self.env else {}


def is_shell(ref: str) -> bool:
    return ref.startswith(SHELL)


def _compact(value: Mapping[str, Any]) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), sort_keys=True)


def _reads_as_json(text: str) -> bool:
    if not text.lstrip().startswith("{"):
        return False
    try:
        return isinstance(json.loads(text), dict)
    except (json.JSONDecodeError, RecursionError):
        return False


def parse(ref: str) -> ShellCommand:
    """The command of a stored (or typed) ``shell:`` reference."""
    if not is_shell(ref):
        raise InvalidInput("handler", f"{ref[:40]!r} is not a shell: handler")
    rest = ref[len(SHELL) :].strip()
    if _reads_as_json(rest):
        return from_mapping(json.loads(rest))
    if not rest:
        raise InvalidInput("handler", "shell: needs a command")
    return ShellCommand(command=rest)


def from_mapping(options: Mapping[str, Any]) -> ShellCommand:
    """A job file's ``{shell: {argv: [...], env: [...]}}`` or ``{shell: {command: ...}}``."""
    where = "handler.shell"
    if not isinstance(options, Mapping):
        raise InvalidInput(where, "must be a mapping")
    unknown = sorted(str(k) for k in set(options) - {"argv", "command", "env"})
    if unknown:
        raise InvalidInput(f"{where}.{unknown[0]}", "unknown key (known: argv, command, env)")
    env = env_names(options.get("env", []), f"{where}.env")
    if ("argv" in options) == ("command" in options):
        raise InvalidInput(where, "give argv (a list, run without a shell) or command (text)")
    if "command" in options:
        command = options["command"]
        if not isinstance(command, str) or not command.strip():
            raise InvalidInput(f"{where}.command", "must be non-empty text")
        return ShellCommand(command=_no_nul(command.strip(), f"{where}.command"), env=env)
    argv = options["argv"]
    if not isinstance(argv, list) or not argv:
        raise InvalidInput(f"{where}.argv", "must be a non-empty list of strings")
    for token in argv:
        if not isinstance(token, str):
            raise InvalidInput(f"{where}.argv", f"{token!r} is not a string")
        _no_nul(token, f"{where}.argv")
    if not argv[0]:
        raise InvalidInput(f"{where}.argv", "the program (argv[0]) must not be empty")
    return ShellCommand(argv=tuple(argv), env=env)


def _no_nul(text: str, field_name: str) -> str:
    if "\x00" in text:
        raise InvalidInput(field_name, "must not contain NUL characters")
    return text


def env_names(value: object, field_name: str = "env") -> tuple[str, ...]:
    """Names of environment variables, sorted and unique; the run's own ``PULSE_*`` are
    refused (Pulse sets them, and the node's hold its database and Redis URLs)."""
    if isinstance(value, str) or not isinstance(value, Sequence):
        raise InvalidInput(field_name, "must be a list of variable names")
    for name in value:
        if not isinstance(name, str) or not _NAME.match(name):
            raise InvalidInput(field_name, f"{name!r} is not a variable name")
        if name.startswith(RESERVED_PREFIX):
            raise InvalidInput(field_name, f"{name} is reserved: PULSE_* variables are Pulse's")
    return tuple(sorted(set(value)))


def canonical(handler: object) -> str:
    """The stored text of a ``shell:`` reference or a job file's ``{shell: {...}}``."""
    if isinstance(handler, Mapping):
        return from_mapping(handler["shell"]).encode()
    if not isinstance(handler, str):
        raise InvalidInput("handler", "must be a string or a mapping")
    return parse(handler.strip()).encode()


def with_env(handler: str, names: Sequence[str]) -> str:
    """``--handler shell:...`` with the CLI's ``--env NAME`` options."""
    if not names:
        return handler
    if not is_shell(handler.strip()):
        raise InvalidInput("env", "--env applies to shell: handlers only")
    found = parse(handler.strip())
    env = env_names([*found.env, *names], "env")
    return ShellCommand(found.argv, found.command, env).encode()


def split_for_api(found: ShellCommand, field_name: str = "handler") -> ShellCommand:
    """The argv form of a shell command written over the API: command text split as a
    shell would split words (``shlex``), refused if any token holds a character a shell
    would read as more than a word, or a control character."""
    if found.argv is not None:
        tokens: list[str] = list(found.argv)
    else:
        assert found.command is not None
        _no_controls(found.command, field_name)
        try:
            tokens = shlex.split(found.command, comments=False, posix=True)
        except ValueError as exc:
            raise InvalidInput(field_name, f"cannot split the command ({exc})") from exc
    if not tokens:
        raise InvalidInput(field_name, "shell: needs a command")
    for token in tokens:
        _no_controls(token, field_name)
        if not token or any(ch.isspace() for ch in token):
            raise InvalidInput(
                field_name, f"{token[:40]!r}: an argument over the API is one non-empty word"
            )
        bad = sorted(set(token) & METACHARACTERS)
        if bad:
            raise InvalidInput(
                field_name,
                f"{bad[0]!r} in {token[:40]!r}: shell syntax is refused over the API "
                "(its commands run without a shell)",
            )
    return ShellCommand(argv=tuple(tokens), env=found.env)


def _no_controls(text: str, field_name: str) -> None:
    if any(ord(ch) < 32 or ord(ch) == 127 for ch in text):
        raise InvalidInput(field_name, "must not contain newlines or control characters")
