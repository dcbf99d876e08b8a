"""A job's options declared once. Each field of ``JobSpec`` carries an ``Option``: how users
write it (its job-file key, the ``pulse jobs add`` flag and help), how it is parsed, its
``jobs`` column, and the lists it belongs to: what ``upsert_jobs`` writes, what a claim
returns, what an each-zone child copies from its parent, what a revision records, what the
read model ``Job`` carries. ``Options`` derives every such list from the declarations, so an
option is added in one place (docs/design/code.md, "A job's options").

One name per field: its name in code is its JSON key and the key a revision records it
under. Two spellings follow from it by rule, never by a table kept elsewhere: a duration
``grace_s`` (seconds) is written ``grace`` in job files and ``--grace`` on the command line
(text such as ``5m``), and a flag is its key with dashes. Where a column predates the rule
its name is declared here (``retries`` is stored in ``max_retries``); columns are never
renamed, as nodes of the previous release read them during a rolling upgrade.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from cluster.timing.durations import format_duration

Parser = Callable[[Any, str], Any]  # (value as given, its key) -> the field's value

_OPTION = "pulse.option"


@dataclass(frozen=True)
class Option:
    """What the declaration of one ``JobSpec`` field says beyond its type and default."""

    help: str = ""  # `pulse jobs add --help`; "": the command declares the flag by hand
    flag: str = ""  # "": --key with dashes
    shown: str | None = None  # the default as --help shows it
    multiple: bool = False  # the flag repeats (--label a=b --label c=d)
    key: str = ""  # the job-file key; "": the name, less `_s` for a duration
    duration: bool = False  # seconds, written as a duration (`_s` off its key)
    aliases: tuple[str, ...] = ()  # earlier job-file keys still read
    parse: Parser | None = None  # None: JobSpec.build checks it with the fields it depends on
    column: str | None = ""  # its jobs column ("": the name); None: none (job_edges)
    jsonb: bool = False  # stored as jsonb
    written: bool = True  # set by upsert_jobs (False: by a statement of its own)
    timing: bool = False  # a change moves an idle job to its new next slot
    claimed: bool = False  # a claim returns it (cluster.store.lock.records.ClaimedJob)
    child: bool = False  # an each-zone job's children copy it (docs/design/zones.md)
    recorded: bool = True  # a revision records it (docs/design/revisions.md)
    read: bool = True  # the read model Job carries it (cluster.jobs.models)


def option(default: Any = dataclasses.MISSING, *, factory: Any = None, **declared: Any) -> Any:
    """A ``JobSpec`` field with its ``Option``: ``grace_s: float = option(60.0, ...)``."""
    meta = {_OPTION: Option(**declared)}
    if factory is not None:
        return dataclasses.field(default_factory=factory, metadata=meta)
    return dataclasses.field(default=default, metadata=meta)


@dataclass(frozen=True)
class Declared:
    """One field with its names resolved: ``name`` in code and JSON, ``key`` in job files and
    build's keywords, ``flag`` on the command line, ``column`` in ``jobs``."""

    name: str
    key: str
    flag: str
    column: str | None
    default: Any  # dataclasses.MISSING for a required field
    option: Option


def _declared(field: dataclasses.Field[Any]) -> Declared:
    found = field.metadata.get(_OPTION)
    if not isinstance(found, Option):
        raise TypeError(f"JobSpec.{field.name} is declared without option(...)")
    key = found.key or (field.name.removesuffix("_s") if found.duration else field.name)
    if field.default_factory is not dataclasses.MISSING:
        default = field.default_factory()
    else:
        default = field.default
    return Declared(
        name=field.name,
        key=key,
        flag=found.flag or "--" + key.replace("_", "-"),
        column=field.name if found.column == "" else found.column,
        default=default,
        option=found,
    )


class Options:
    """The declared fields of a spec class, in declaration order, and the lists derived
    from them."""

    def __init__(self, spec: type) -> None:
        self.all: tuple[Declared, ...] = tuple(_declared(f) for f in dataclasses.fields(spec))
        self.by_name: dict[str, Declared] = {d.name: d for d in self.all}
        self.by_key: dict[str, Declared] = {d.key: d for d in self.all}
        self.aliases: dict[str, str] = {a: d.key for d in self.all for a in d.option.aliases}
        stored = [d for d in self.all if d.column is not None]
        self.by_column: dict[str, Declared] = {d.column: d for d in stored if d.column}
        # The column lists the statements of cluster/store/sql expand ({fields:LIST:...}).
        written = [d for d in stored if d.option.written]
        self.columns: dict[str, tuple[str, ...]] = {
            "written": _columns(written),
            "timing": _columns(d for d in written if d.option.timing),
            "claimed": _columns(d for d in stored if d.option.claimed),
            "child": _columns(d for d in stored if d.option.child),
            "child_timing": _columns(d for d in stored if d.option.child and d.option.timing),
            "recorded": _columns(d for d in stored if d.option.recorded),
        }
        self.recorded = tuple(d for d in stored if d.option.recorded)
        self.read = tuple(d for d in stored if d.option.read)

    def __iter__(self) -> Iterator[Declared]:
        return iter(self.all)

    def keys(self) -> frozenset[str]:
        """Every key a job file, a ``Registry`` or an API body may give."""
        return frozenset(self.by_key) | frozenset(self.aliases)

    def canonical(self, entry: Mapping[str, Any]) -> dict[str, Any]:
        """``entry`` with its earlier keys under the current ones (a key given under both is
        refused by the caller's check of ``twice``)."""
        return {self.aliases.get(k, k): v for k, v in entry.items()}

    def set_apart(self, name: str, value: Any) -> bool:
        """Whether a recorded ``value`` of the field ``name`` is one a definition sets: not
        null, empty, or the field's default (what a created job's plan shows)."""
        found = self.by_name.get(name)
        if value is None or value == [] or value == {}:
            return False
        if found is None or found.default is dataclasses.MISSING:
            return True
        default = list(found.default) if isinstance(found.default, tuple) else found.default
        return bool(value != default)

    def as_written(self, name: str, value: Any) -> tuple[str, Any]:
        """A recorded field as a job file writes it: its key, a duration as text (``5m``)."""
        found = self.by_name.get(name)
        if found is None:
            return name, value
        if found.option.duration and isinstance(value, int | float):
            return found.key, format_duration(value)
        return found.key, value

    def twice(self, entry: Mapping[str, Any]) -> str | None:
        """An earlier key given beside its current one, if any."""
        for alias, key in self.aliases.items():
            if alias in entry and key in entry:
                return alias
        return None


def _columns(found: Iterator[Declared] | list[Declared]) -> tuple[str, ...]:
    return tuple(str(d.column) for d in found)
