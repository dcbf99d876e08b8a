"""The one root exception of Pulse and its family.

Adapters translate driver errors at the seam (``raise StoreError(...) from exc``) so callers
handle Pulse errors, never psycopg or redis ones. ``InvalidInput`` carries the field it is
about: the CLI prints it as one line and exits 2.
"""

from __future__ import annotations


class PulseError(Exception):
    """Root of every error Pulse raises on purpose."""


class InvalidInput(PulseError, ValueError):
    """Bad user input; names the field and the problem, writes nothing."""

    def __init__(self, field: str, problem: str) -> None:
        super().__init__(f"{field}: {problem}")
        self.field = field
        self.problem = problem


class Conflict(InvalidInput):
    """Input that clashes with what exists (a duplicate name, a job running now); the CLI
    treats it as bad input, the HTTP API answers 409."""


class NotFound(PulseError, LookupError):
    """A job (or other named thing) that does not exist."""


class NotRunning(PulseError):
    """A request about a running slot of a job that has none running (``pulse runs cancel``)."""


class StoreError(PulseError):
    """Postgres could not be reached or refused a statement."""


class MembershipError(PulseError):
    """Redis could not be reached or refused a command."""


class ConfigError(PulseError):
    """Settings that would break the cluster's guarantees; the node refuses to start."""
