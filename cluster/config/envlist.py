"""Which of the nodes' environment variables jobs written through the HTTP API may name: the
``api.env`` config key (``pulse config set api.env 'BILLING_*,REPORTS_TOKEN'``), globs over
variable names, empty by default.

A ``${env:NAME}`` in a handler (an HTTP header, a broker URL) and a name in a shell job's
``env`` list make a node hand that variable to a request or a process; over the API each
must match an entry. ``PULSE_*`` never does: those are the node's own settings (its
database and Redis URLs). The CLI and job files are the operator's, and not limited.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from fnmatch import fnmatchcase

from cluster.errors import InvalidInput

API_ENV = "api.env"
_GLOB = re.compile(r"^[A-Za-z0-9_*?\[\]!]+$")
RESERVED_PREFIX = "PULSE_"


@dataclass(frozen=True)
class EnvAllowList:
    patterns: tuple[str, ...] = ()

    @classmethod
    def from_config(cls, values: dict[str, str]) -> EnvAllowList:
        return cls(parse(values.get(API_ENV, "")))

    def allows(self, name: str) -> bool:
        if name.startswith(RESERVED_PREFIX):
            return False
        return any(fnmatchcase(name, pattern) for pattern in self.patterns)


def parse(text: str) -> tuple[str, ...]:
    """The globs of a stored value; ``InvalidInput`` naming the key if one is bad."""
    if not isinstance(text, str):
        raise InvalidInput(API_ENV, "must be text")
    patterns = tuple(p.strip() for p in text.split(",") if p.strip())
    for pattern in patterns:
        if not _GLOB.match(pattern):
            raise InvalidInput(
                API_ENV, f"{pattern!r} is not a variable name or glob like BILLING_*"
            )
    return patterns


def canonical(text: str) -> str:
    return ",".join(parse(text))
