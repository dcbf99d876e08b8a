"""``pulse import crontab``: a user crontab (``crontab -l``) as Pulse jobs.

Each schedule line (five fields, or a macro) becomes a ``shell:`` job running the line's
command with ``/bin/sh -c``, as cron does. ``CRON_TZ=`` and ``TZ=`` lines set the ``tz`` of
the lines after them. Other variable assignments are carried into the commands after them
as ``export NAME='value';`` when that is safe; a variable whose name says it holds a secret
(a password, a token, a ``*_URL`` or ``*_DSN``), or whose value has a password in a URL, is
not copied (its value would sit in the job row) but named in the handler's ``env``, so
nodes pass their own value; ``MAILTO``/``MAILFROM`` and a ``SHELL`` other than ``/bin/sh``
are listed. A system crontab (``--system``) has a user field after the schedule: it is
dropped and listed (the node's user runs the command); a user crontab's line whose command
starts with a login name is refused with that hint rather than run as a command named
``root``. ``@reboot`` is refused (Pulse has no boot of a host to run at), and so is an
unescaped ``%`` (cron feeds what follows it to stdin). Every line not mapped is listed with
its line number.
"""

from __future__ import annotations

import pwd
import re
import shlex
import shutil
from typing import Any

from cluster.importers.imported import Imported, Options, is_secret

_ASSIGNMENT = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)\s*=\s*(.*)$")
MACROS = {
    "@yearly": "@yearly",
    "@annually": "@yearly",
    "@monthly": "@monthly",
    "@weekly": "@weekly",
    "@daily": "@daily",
    "@midnight": "@daily",
    "@hourly": "@hourly",
}
_SAFE_SHELLS = ("/bin/sh", "/usr/bin/sh")
_NOT_MAPPED = {
    "MAILTO": "mail of a job's output is not mapped; use `pulse alerts add --format email`",
    "MAILFROM": "mail of a job's output is not mapped; use `pulse alerts add --format email`",
}


def _value(text: str) -> str:
    """An assignment's value as cron reads it: outer matching quotes removed."""
    text = text.strip()
    if len(text) >= 2 and text[0] == text[-1] and text[0] in "'\"":
        return text[1:-1]
    return text


def _command(text: str) -> str:
    """The line's command with cron's ``\\%`` unescaped; ``ValueError`` for a bare ``%``."""
    if re.search(r"(?<!\\)%", text):
        raise ValueError(
            "an unescaped % sends the rest of the line to the command's stdin, which Pulse "
            "does not feed; write \\% for a literal %"
        )
    return text.replace("\\%", "%")


def _slug(command: str) -> str:
    try:
        words = shlex.split(command)
    except ValueError:
        words = command.split()
    words = [w for w in words if not _ASSIGNMENT.match(w)] or ["job"]
    return words[0].rsplit("/", 1)[-1]


class _Crontab:
    def __init__(self, result: Imported, system: bool) -> None:
        self.result = result
        self.system = system
        self.tz: str | None = None
        self.exports: dict[str, str] = {}
        self.env: set[str] = set()

    def assignment(self, where: str, name: str, raw: str) -> None:
        value = _value(raw)
        if name in ("CRON_TZ", "TZ"):
            self.tz = value or None
        elif name in _NOT_MAPPED:
            self.result.problem(where, f"{name}: {_NOT_MAPPED[name]}")
        elif name == "SHELL":
            if value not in _SAFE_SHELLS:
                self.result.problem(
                    where, f"SHELL={value}: not mapped, Pulse runs commands with /bin/sh"
                )
        elif is_secret(name, value):
            self.env.add(name)
            self.result.problem(
                where,
                f"{name} looks like a secret: its value is not copied; the jobs after it pass "
                f"the node's ${name} (set it on every node)",
            )
        else:
            self.exports[name] = value

    def job(self, where: str, schedule: str, command: str) -> None:
        prefix = "".join(f"export {n}={shlex.quote(v)}; " for n, v in self.exports.items())
        handler: Any = "shell:" + prefix + command
        if self.env:
            handler = {"shell": {"command": prefix + command, "env": sorted(self.env)}}
        entry: dict[str, Any] = {
            "name": self.result.name(_slug(command)),
            "schedule": schedule,
            "handler": handler,
        }
        if self.tz:
            entry["tz"] = self.tz
        self.result.add(where, entry)

    def line(self, number: int, text: str) -> None:
        where = f"line {number}"
        stripped = text.strip()
        if not stripped or stripped.startswith("#"):
            return
        assignment = _ASSIGNMENT.match(stripped)
        if assignment and not stripped.startswith("@"):
            self.assignment(where, assignment[1], assignment[2])
            return
        if stripped.startswith("@"):
            macro, _, rest = stripped.partition(" ")
            macro = macro.split("\t", 1)[0]
            rest = stripped[len(macro) :].strip()
            if macro == "@reboot":
                self.result.problem(
                    where,
                    "@reboot refused: it runs when one host boots, and Pulse jobs run on "
                    "a schedule on whichever node holds them",
                )
                return
            if macro not in MACROS:
                self.result.problem(where, f"{macro}: not a cron macro")
                return
            schedule, command = MACROS[macro], rest
        else:
            fields = stripped.split(None, 5)
            if len(fields) < 6:
                self.result.problem(where, "not a schedule line (five fields and a command)")
                return
            schedule, command = " ".join(fields[:5]), fields[5]
            extra = command.split(None, 1)[0]
            if _SIXTH_FIELD.fullmatch(extra) and not shutil.which(extra):
                self.result.problem(
                    where,
                    f"{extra!r} after the five fields looks like a sixth one (seconds or a "
                    "year, which cron does not have); it was imported as the command's start",
                )
        if self.system:
            user, _, command = command.partition(" ")
            command = command.strip()
            if command:
                self.result.problem(where, f"user {user}: not mapped, the node's user runs it")
        elif _is_user(command.split(None, 1)[0]):
            self.result.problem(
                where,
                f"not imported: {command.split(None, 1)[0]!r} looks like the user field of a "
                "system crontab (/etc/crontab, /etc/cron.d); import it with --system",
            )
            return
        if not command:
            self.result.problem(where, "no command")
            return
        try:
            command = _command(command)
        except ValueError as exc:
            self.result.problem(where, str(exc))
            return
        self.job(where, schedule, command)


# A word of schedule-field characters where the command starts: a crontab written for a
# scheduler with a seconds or a year field.
_SIXTH_FIELD = re.compile(r"[0-9*?/,\-LW#]+")


def _is_user(word: str) -> bool:
    """A login name of this host that is not also a command: a user field, read as one."""
    try:
        pwd.getpwnam(word)
    except KeyError:
        return False
    return shutil.which(word) is None


def import_crontab(text: str, source: str, options: Options, *, system: bool = False) -> Imported:
    """The jobs of a crontab's text (``system``: with a user field after the schedule, as
    /etc/crontab has); lines not mapped are in ``problems``."""
    result = Imported(source, options.checked())
    crontab = _Crontab(result, system)
    for number, line in enumerate(text.splitlines(), 1):
        crontab.line(number, line)
    return result
