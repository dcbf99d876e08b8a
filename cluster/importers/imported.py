"""What an importer produces: the job mappings of a Pulse job file and the list of what it
could not map, and the checks every importer shares.

Each job mapping is checked with ``JobSpec.from_mapping`` before it is kept, so a file an
importer writes is one ``pulse jobs apply`` accepts; an entry that fails the check is
reported with where it came from instead. With ``watch`` the jobs are watch jobs (``watch:
true``, no handler): Pulse observes the legacy scheduler's runs instead of running them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

import yaml

from cluster.errors import InvalidInput
from cluster.jobs.fields import DEFAULT_TENANT, validate_name
from cluster.jobs.spec import JobSpec

# A watch job runs nothing; its mapping is checked with this stand-in handler, and it keeps
# only what says when a run is expected (WATCH_NOTE says so once per import).
_CHECK_HANDLER = "shell:true"
WATCH_KEYS = ("name", "watch", "tenant", "schedule", "tz", "paused")
WATCH_NOTE = (
    "--watch: handlers, payloads and run policies (overlap, retries, timeout, catch-up) are "
    "left out: a watch job runs nothing"
)
_SLUG = re.compile(r"[^a-z0-9]+")
# Variable names whose values are secrets: never written into a job file. A URL or a DSN
# (DATABASE_URL, SENTRY_DSN) often carries a password, so it counts as one whatever it holds.
SECRET_NAME = re.compile(
    r"(PASS|SECRET|TOKEN|KEY|CREDENTIAL|AUTH|(^|_)URL$|(^|_)URI$|(^|_)DSN$)", re.IGNORECASE
)
_URL_PASSWORD = re.compile(r"://[^/@\s]*:[^@/\s]+@")


def is_secret(name: str, value: str) -> bool:
    """Whether a variable is a secret: by its name, or a value with a password in a URL."""
    return bool(SECRET_NAME.search(name) or _URL_PASSWORD.search(value))


@dataclass(frozen=True)
class Options:
    tenant: str = DEFAULT_TENANT
    prefix: str = ""
    watch: bool = False

    def checked(self) -> Options:
        validate_name(self.tenant, "tenant")
        if any(ord(ch) < 32 for ch in self.prefix):
            raise InvalidInput("prefix", "must not contain control characters")
        return self


@dataclass
class Imported:
    """Jobs in the order found, and one line per entry (or part of one) not mapped."""

    source: str
    options: Options
    jobs: list[dict[str, Any]] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    _names: set[str] = field(default_factory=set)

    def name(self, base: str) -> str:
        """``prefix + base`` made unique in this file (``-2``, ``-3`` ... on repeats)."""
        stem = self.options.prefix + (_SLUG.sub("-", base.lower()).strip("-") or "job")
        found, n = stem, 1
        while found in self._names:
            n += 1
            found = f"{stem}-{n}"
        self._names.add(found)
        return found

    def problem(self, where: str, text: str) -> None:
        self.problems.append(f"{where}: {text}")

    def add(self, where: str, entry: dict[str, Any]) -> bool:
        """Keep ``entry`` (name, schedule, handler, ...) if Pulse accepts it; else report it
        at ``where``. In watch mode the handler is replaced by ``watch: true``."""
        entry = {"tenant": self.options.tenant, **entry}
        if self.options.tenant == DEFAULT_TENANT:
            del entry["tenant"]
        checked = dict(entry)
        if self.options.watch:
            checked["handler"] = _CHECK_HANDLER
        try:
            JobSpec.from_mapping(checked)
        except InvalidInput as exc:
            self._names.discard(entry["name"])
            self.problem(where, f"not imported: {exc}")
            return False
        if self.options.watch:
            watched = {**entry, "watch": True}
            entry = {key: watched[key] for key in WATCH_KEYS if key in watched}
        self.jobs.append(entry)
        return True

    def job_file(self) -> str:
        """The YAML job file, with a header saying where it came from."""
        source = "".join(ch if ch.isprintable() else "?" for ch in self.source)
        header = (
            f"# Imported from {source} by `pulse import`; apply with `pulse jobs apply FILE`.\n"
        )
        if self.problems:
            header += (
                f"# {len(self.problems)} entries or parts not mapped: see the import's output.\n"
            )
        return header + yaml.safe_dump(
            {"jobs": self.jobs}, sort_keys=False, allow_unicode=True, width=100
        )
