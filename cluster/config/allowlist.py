"""Which handlers jobs written through the HTTP API may use: the cluster's allow-list, the
``api.handlers`` config key (``pulse config set api.handlers 'billing.jobs:rollup,...'``).

Empty by default. Each entry is parsed by kind, never matched as text against a handler:

- ``module:function``: that exact Python function (no glob: a registered function is the
  other way in, ``cluster.config.admission``);
- ``shell:PROGRAM ARG...``: split like the command it allows; the program is literal, each
  other token is a glob matching exactly one argument, a final ``**`` any number of them.
  A glob never matches an argument starting with ``-`` unless it starts with ``-`` itself
  (``*`` is a value, never an option), a glob holding ``/`` never matches a path with a
  ``.`` or ``..`` segment, and no token matches an empty or blank argument; a literal
  ``--`` may be pinned (``shell:/opt/backup/run -- *``);
- ``http:[METHOD ]URL``: scheme, host, port and path prefix (``cluster.config.httprules``);
- ``celery:TASK``: a glob over the task name.

``pulse config set`` refuses an entry that is none of these. A stored value from an older
release whose entries no longer parse allows nothing through those entries, and each is
logged once (``from_config``).
"""

from __future__ import annotations

import logging
import re
import shlex
from dataclasses import dataclass, field
from fnmatch import fnmatchcase

from cluster.config.httprules import HTTP, HttpRule, parse_rule
from cluster.errors import InvalidInput
from cluster.jobs.shellrefs import METACHARACTERS, SHELL

logger = logging.getLogger(__name__)

API_HANDLERS = "api.handlers"
CELERY = "celery:"
_PY_REF = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*:[A-Za-z_][A-Za-z0-9_]*$")
_TASK_GLOB = re.compile(r"^[A-Za-z0-9_.:*?\[\]!-]+$")
_GLOB = frozenset("*?[]!")
_DOT_SEGMENTS = frozenset({".", ".."})
_warned: set[str] = set()


@dataclass(frozen=True)
class ShellRule:
    """argv[0] literally, then one glob per argument; a final ``**`` takes the rest."""

    tokens: tuple[str, ...]

    def allows(self, argv: tuple[str, ...]) -> bool:
        program, *globs = self.tokens
        if not argv or argv[0] != program:
            return False
        rest = argv[1:]
        if globs and globs[-1] == "**":
            globs = globs[:-1]
            if len(rest) < len(globs) or not all(_value(arg) for arg in rest[len(globs) :]):
                return False
            rest = rest[: len(globs)]
        return len(rest) == len(globs) and all(map(_matches, rest, globs))


def _value(arg: str) -> bool:
    """An argument a glob may stand for: not blank, not an option (tests/unit/test_allowlist.py)."""
    return bool(arg.strip()) and not arg.startswith("-")


def _matches(arg: str, glob: str) -> bool:
    """One argument against one pattern token. A literal matches itself; a glob matches an
    option only if it is written as one (``--level=*``), and a path glob no ``.`` or ``..``
    segment (``/data/backups/*`` must not read ``/data/backups/../admin-token``)."""
    if not arg.strip():
        return False
    if not set(glob) & _GLOB:
        return arg == glob
    if arg.startswith("-") and not glob.startswith("-"):
        return False
    if "/" in glob and _DOT_SEGMENTS & set(arg.split("/")):
        return False
    return fnmatchcase(arg, glob)


def _shell_rule(pattern: str) -> ShellRule:
    rest = pattern[len(SHELL) :].strip()
    hint = "write it like 'shell:/opt/backup/run --full *' (one glob per argument, ** last)"
    try:
        tokens = tuple(shlex.split(rest, posix=True)) if not rest.startswith("{") else ()
    except ValueError:
        tokens = ()
    if not tokens:
        raise InvalidInput(API_HANDLERS, f"{pattern!r} is not a command pattern: {hint}")
    if set(tokens[0]) & (_GLOB | METACHARACTERS):
        raise InvalidInput(API_HANDLERS, f"{pattern!r}: the program must be literal: {hint}")
    for position, token in enumerate(tokens):
        bad = set(token) & (METACHARACTERS - _GLOB)
        if bad or ("**" in token and (token != "**" or position != len(tokens) - 1)):
            raise InvalidInput(API_HANDLERS, f"{pattern!r}: {token!r} is not allowed: {hint}")
    return ShellRule(tokens)


@dataclass(frozen=True)
class AllowList:
    python: frozenset[str] = frozenset()
    shell: tuple[ShellRule, ...] = ()
    http: tuple[HttpRule, ...] = ()
    celery: tuple[str, ...] = ()
    patterns: tuple[str, ...] = field(default=(), compare=False)  # as stored, for messages

    @classmethod
    def from_config(cls, values: dict[str, str]) -> AllowList:
        """The entries of the stored value that parse; each one that does not (a value
        from an older release) allows nothing, and is logged once per process."""
        text = values.get(API_HANDLERS, "")
        good = []
        for pattern in _split(text):
            try:
                _entry(pattern)
            except InvalidInput as exc:
                if pattern not in _warned:
                    _warned.add(pattern)
                    logger.warning(
                        "ignoring %s entry %r: %s (pulse config set %s ...)",
                        API_HANDLERS,
                        pattern,
                        exc.problem,
                        API_HANDLERS,
                        extra={"event": "allowlist_entry_ignored"},
                    )
                continue
            good.append(pattern)
        return build(good)

    def allows_python(self, ref: str) -> bool:
        return ref in self.python

    def allows_shell(self, argv: tuple[str, ...]) -> bool:
        return any(rule.allows(argv) for rule in self.shell)

    def allows_http(self, method: str, url: str) -> bool:
        return any(rule.allows(method, url) for rule in self.http)

    def allows_celery(self, task: str) -> bool:
        return any(fnmatchcase(task, glob) for glob in self.celery)

    def shown(self) -> str:
        return ",".join(self.patterns) or "empty"


def _split(text: str) -> list[str]:
    if not isinstance(text, str):
        raise InvalidInput(API_HANDLERS, "must be text")
    return [p.strip() for p in text.split(",") if p.strip()]


def _entry(pattern: str) -> object:
    if any(ord(ch) < 32 for ch in pattern):
        raise InvalidInput(API_HANDLERS, "must not contain control characters")
    if pattern.startswith(SHELL):
        return _shell_rule(pattern)
    if pattern.startswith(HTTP):
        return parse_rule(pattern, API_HANDLERS)
    if pattern.startswith(CELERY):
        task = pattern[len(CELERY) :].strip()
        if not _TASK_GLOB.match(task):
            raise InvalidInput(API_HANDLERS, f"{pattern!r} is not like 'celery:billing.tasks.*'")
        return task
    if _PY_REF.match(pattern):
        return pattern
    raise InvalidInput(
        API_HANDLERS,
        f"{pattern!r} is not an entry: name a function exactly ('billing.jobs:rollup'; "
        "globs no longer match Python handlers), or 'shell:...', 'http:...', 'celery:...'",
    )


def build(patterns: list[str]) -> AllowList:
    entries = [_entry(p) for p in patterns]
    return AllowList(
        python=frozenset(p for p in patterns if not p.startswith((SHELL, HTTP, CELERY))),
        shell=tuple(e for e in entries if isinstance(e, ShellRule)),
        http=tuple(e for e in entries if isinstance(e, HttpRule)),
        celery=tuple(p[len(CELERY) :].strip() for p in patterns if p.startswith(CELERY)),
        patterns=tuple(patterns),
    )


def parse(text: str) -> AllowList:
    """Every entry of ``text``; ``InvalidInput`` naming the key at the first bad one."""
    return build(_split(text))


def canonical(text: str) -> str:
    return ",".join(parse(text).patterns)
