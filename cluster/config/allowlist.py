"""Which handlers jobs written through the HTTP API may use: the cluster's allow-list, the
``api.handlers`` config key (``pulse config set api.handlers 'billing.*:*,reports.jobs:*'``).

Empty by default: the API can read, pause, resume and trigger every job, but create or
change only jobs whose handler a pattern names. Patterns are shell-style globs matched
against the whole handler reference. A ``shell:`` (or ``http:``) handler runs whatever it
says on every node, so only a pattern that itself starts with ``shell:`` (``http:``) can
allow one: ``*`` or ``*:*`` never does.
"""

from __future__ import annotations

from dataclasses import dataclass
from fnmatch import fnmatchcase

from cluster.errors import InvalidInput

API_HANDLERS = "api.handlers"
# Handlers that run a command or reach an address of the handler's choosing.
GUARDED_SCHEMES = ("shell:", "http:", "https:")


def _scheme(text: str) -> str | None:
    return next((s for s in GUARDED_SCHEMES if text.startswith(s)), None)


def parse(text: str) -> tuple[str, ...]:
    """The patterns of a stored value; ``InvalidInput`` naming the key if one is bad."""
    if not isinstance(text, str):
        raise InvalidInput(API_HANDLERS, "must be text")
    patterns = tuple(p.strip() for p in text.split(",") if p.strip())
    for pattern in patterns:
        if ":" not in pattern or any(ord(ch) < 32 for ch in pattern):
            raise InvalidInput(
                API_HANDLERS,
                f"{pattern!r} is not a handler pattern like 'billing.*:*' or 'shell:backup *'",
            )
    return patterns


def canonical(text: str) -> str:
    return ",".join(parse(text))


@dataclass(frozen=True)
class AllowList:
    patterns: tuple[str, ...] = ()

    @classmethod
    def from_config(cls, values: dict[str, str]) -> AllowList:
        return cls(parse(values.get(API_HANDLERS, "")))

    def allows(self, handler: str) -> bool:
        scheme = _scheme(handler)
        return any(
            _scheme(pattern) == scheme and fnmatchcase(handler, pattern)
            for pattern in self.patterns
        )

    def check(self, handler: str, field: str = "handler") -> None:
        """``InvalidInput`` naming ``field`` unless the allow-list names ``handler``."""
        if not self.allows(handler):
            shown = handler if len(handler) <= 80 else handler[:77] + "..."
            raise InvalidInput(
                field,
                f"{shown!r} is not allowed through the API "
                f"(pulse config set {API_HANDLERS} ...; now: {','.join(self.patterns) or 'empty'})",
            )
