"""The keys a job definition is given under, before any value is parsed: a job-file entry or
an API body (``schedule`` or a ``schedules`` list, earlier keys still read under their
aliases), and ``JobSpec.build``'s keywords. Owns refusing an unknown key, a key given under
both its names, ``schedule`` beside ``schedules``, a missing required key and a
``payload`` or ``payload_schema`` that is no object, each as one ``InvalidInput`` naming
the key; and the reverse, a spec's options as ``build``'s keywords.

Kept apart from ``cluster.jobs.spec``, which declares the options and parses their values:
these rules follow from the declarations (``Options``), whatever the options are.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from cluster.errors import InvalidInput
from cluster.jobs.options import Options

__all__ = ["POSITIONAL", "EntryKeys"]

POSITIONAL = frozenset({"name", "schedule", "handler"})  # build's positional arguments
_SKIPPED = ("name", "schedule", "schedules", "handler")  # an entry's keys that are no option


class EntryKeys:
    """The keys of the spec class whose declarations are ``options``."""

    def __init__(self, options: Options) -> None:
        self._options = options
        self._option_keys = frozenset(options.by_key) - POSITIONAL
        self._file_keys = options.keys() | {"schedules"}

    def check_options(self, options: Mapping[str, Any]) -> None:
        """Refuse a keyword of ``build`` that is no option's key."""
        unknown = sorted(set(options) - self._option_keys)
        if unknown:
            raise InvalidInput(unknown[0], "unknown key")

    def arguments(self, entry: object) -> tuple[Any, Any, Any, dict[str, Any]]:
        """``build``'s arguments of a job-file entry (or an API body): its name, its schedule
        or list of schedules, its handler and its options by their current keys."""
        if not isinstance(entry, Mapping):
            raise InvalidInput("entry", "must be a mapping of option names to values")
        unknown = sorted(set(entry) - self._file_keys)
        if unknown:
            raise InvalidInput(unknown[0], "unknown key")
        twice = self._options.twice(entry)
        if twice is not None:
            raise InvalidInput(twice, f"give {twice} or {self._options.aliases[twice]}, not both")
        entry = self._options.canonical(entry)
        if "schedule" in entry and "schedules" in entry:
            raise InvalidInput("schedules", "give schedule or schedules, not both")
        timing = entry.get("schedules", entry.get("schedule"))
        if "schedules" in entry and isinstance(timing, str):
            raise InvalidInput("schedules", "must be a list of schedules")
        for required in ("name", "handler"):
            if required not in entry and not (required == "handler" and entry.get("watch")):
                raise InvalidInput(required, "missing")
        if timing is None:
            raise InvalidInput("schedule", "missing")
        payload = entry.get("payload")
        if payload is not None and not isinstance(payload, Mapping | str):
            raise InvalidInput("payload", "must be a JSON object")
        schema = entry.get("payload_schema")
        if schema is not None and not isinstance(schema, Mapping | str):
            raise InvalidInput("payload_schema", "must be a JSON object")
        options = {k: v for k, v in entry.items() if k not in _SKIPPED}
        return entry["name"], timing, entry.get("handler"), options

    def given(self, spec: object) -> dict[str, Any]:
        """The options of ``spec`` that differ from their defaults, as ``build``'s keywords."""
        return {
            d.key: getattr(spec, d.name)
            for d in self._options
            if d.key not in POSITIONAL and getattr(spec, d.name) != d.default
        }
