"""Jobs defined in code: ``Registry`` and its ``cron``/``every`` decorators, the functions it
offers to jobs written over the HTTP API (``handler``), and finding the registries of a
module for ``pulse jobs apply --module`` and ``pulse node --sync-jobs``.

A decorator turns its keywords into a job-file entry (the keys of ``JobSpec.from_mapping``)
and validates it at once, so an option added to job files works here unchanged and a bad
one fails at import time with the one-line ``InvalidInput`` the CLI prints (while
``apply --module`` imports a module, every refusal of the module is collected instead). The handler
reference is ``fn.__module__:fn.__qualname__``; a function another node could not import
by that name (defined in ``__main__``, nested, a lambda, a method) is refused.
"""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any, TypeVar, overload

import yaml

from cluster.errors import InvalidInput
from cluster.jobs.fields import DEFAULT_TENANT, validate_name
from cluster.jobs.spec import JobSpec
from cluster.timing.durations import format_duration

F = TypeVar("F", bound=Callable[..., Any])

# While ``registries_in`` imports a module, the decorators' refusals are collected here
# (so one run reports every bad job, as a job file does); otherwise they raise at once.
_collecting: ContextVar[list[str] | None] = ContextVar("pulse_registry_problems", default=None)


def _refused(label: str, exc: InvalidInput) -> None:
    """Raise ``exc``, or collect it while ``registries_in`` imports a module."""
    problems = _collecting.get()
    if problems is None:
        raise exc
    problems.append(f"{label}: {exc}")


@dataclass(frozen=True)
class Entry:
    """One registered job: the job-file mapping it was built from, and its spec."""

    mapping: dict[str, Any]
    spec: JobSpec


def handler_ref(fn: Callable[..., Any]) -> str:
    """``module:function`` for a module-level function; ``InvalidInput("handler")`` else."""
    if not callable(fn):
        raise InvalidInput("handler", f"{fn!r} is not a function")
    module = getattr(fn, "__module__", None)
    qualname = getattr(fn, "__qualname__", None)
    if not isinstance(module, str) or not isinstance(qualname, str):
        raise InvalidInput("handler", f"{fn!r} has no module and name to import it by")
    if qualname == "<lambda>" or qualname.endswith(".<lambda>"):
        raise InvalidInput("handler", "a lambda cannot be imported by other nodes; use a def")
    if "<locals>" in qualname:
        raise InvalidInput(
            "handler", f"{qualname} is nested in a function; define it at module level"
        )
    if "." in qualname:
        raise InvalidInput("handler", f"{qualname} is a method; use a module-level function")
    if module == "__main__":
        raise InvalidInput(
            "handler",
            f"{qualname} is defined in __main__, which other nodes cannot import; "
            "move it to a module",
        )
    return f"{module}:{qualname}"


class Registry:
    """Jobs of one tenant defined with decorators; apply them with ``pulse jobs apply
    --module``, ``pulse node --sync-jobs`` or ``Node(sync_jobs=[...])``.

    Options are the keys of a job file (``pulse jobs add``'s long options with
    underscores): ``tz``, ``payload``, ``catch_up``, ``grace``, ``timeout``, ``retries``,
    ``asserts``...
    """

    def __init__(self, tenant: str = DEFAULT_TENANT) -> None:
        self.tenant = validate_name(tenant, "tenant")
        self._entries: dict[str, Entry] = {}
        self._offered: dict[str, None] = {}  # handler refs, in registration order

    @overload
    def handler(self, fn: F) -> F: ...

    @overload
    def handler(self, fn: None = None) -> Callable[[F], F]: ...

    def handler(self, fn: F | None = None) -> F | Callable[[F], F]:
        """Offer ``fn`` to jobs of this registry's tenant written over the HTTP API, without
        making a job of it: ``@registry.handler``, or ``registry.handler(some_function)``
        for a function defined elsewhere. The jobs a registry defines are offered too."""

        def offer(target: F) -> F:
            try:
                self._offered[handler_ref(target)] = None
            except InvalidInput as exc:
                _refused(getattr(target, "__qualname__", repr(target)), exc)
            return target

        return offer if fn is None else offer(fn)

    def handler_refs(self) -> list[str]:
        """The handlers this registry offers to the API: its jobs' and ``handler``'s."""
        refs = dict.fromkeys(entry.spec.handler for entry in self._entries.values())
        return list({**refs, **self._offered})

    def cron(
        self,
        expr: str | Sequence[str | Mapping[str, Any]],
        *,
        name: str | None = None,
        **options: Any,
    ) -> Callable[[F], F]:
        """Register the decorated function on a cron schedule (5 or 6 fields, or a macro),
        or on several: a list of expressions or ``{schedule, payload, start, end}`` mappings."""

        def register(fn: F) -> F:
            try:
                self.add(fn, expr, name=name, **options)
            except InvalidInput as exc:
                label = name if isinstance(name, str) else getattr(fn, "__qualname__", repr(fn))
                _refused(label, exc)
            return fn

        return register

    def every(
        self, interval: str | float, *, name: str | None = None, **options: Any
    ) -> Callable[[F], F]:
        """Register the decorated function every ``interval`` (``"30s"``, ``"1h30m"``, or
        seconds)."""
        if isinstance(interval, int | float) and not isinstance(interval, bool):
            interval = format_duration(float(interval))
        if not isinstance(interval, str):
            raise InvalidInput("schedule", f"every needs a duration such as 30s, got {interval!r}")
        return self.cron(f"@every {interval}", name=name, **options)

    def add(
        self,
        fn: Callable[..., Any],
        schedule: str | Sequence[str | Mapping[str, Any]],
        *,
        name: str | None = None,
        **options: Any,
    ) -> JobSpec:
        """Register ``fn`` on ``schedule`` (or a list of schedules); the decorators' body."""
        for reserved in ("schedule", "schedules", "handler", "tenant"):
            if reserved in options:
                raise InvalidInput(reserved, "is set by the registry, not as an option")
        ref = handler_ref(fn)
        mapping: dict[str, Any] = {
            "name": ref.split(":")[1] if name is None else name,
            "handler": ref,
        }
        if isinstance(schedule, str):
            mapping["schedule"] = schedule
        else:
            mapping["schedules"] = list(schedule)
        if self.tenant != DEFAULT_TENANT:
            mapping["tenant"] = self.tenant
        mapping.update(options)
        spec = JobSpec.from_mapping(mapping)
        if spec.name in self._entries:
            raise InvalidInput(
                "name", f"{spec.name!r} is registered twice in tenant {spec.tenant!r}"
            )
        self._entries[spec.name] = Entry(mapping, spec)
        return spec

    def specs(self) -> list[JobSpec]:
        """The validated specs, in registration order."""
        return [entry.spec for entry in self._entries.values()]

    def mappings(self) -> list[dict[str, Any]]:
        """The job-file entries, as written in the decorators."""
        return [dict(entry.mapping) for entry in self._entries.values()]

    def __len__(self) -> int:
        return len(self._entries)

    def __repr__(self) -> str:
        return f"Registry(tenant={self.tenant!r}, jobs={list(self._entries)!r})"


def handlers_of(registries: Iterable[Registry]) -> list[tuple[str, str]]:
    """(tenant, handler) of everything the registries offer to the API."""
    return [(r.tenant, ref) for r in registries for ref in r.handler_refs()]


def registries_in(module_name: str) -> list[Registry]:
    """Every ``Registry`` at the top level of a module, imported with the working
    directory on the path; ``InvalidInput("module")`` if it does not import or has none."""
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    problems: list[str] = []
    token = _collecting.set(problems)
    try:
        module = importlib.import_module(module_name)
    except InvalidInput as exc:  # raised by the module's own code
        raise InvalidInput("module", f"{module_name}: {exc}") from exc
    except BaseException as exc:  # any failure of user code (even SystemExit) is bad input
        if isinstance(exc, KeyboardInterrupt):
            raise
        first = (str(exc).splitlines() or [""])[0]
        raise InvalidInput(
            "module", f"{module_name} does not import ({type(exc).__name__}: {first})"
        ) from exc
    finally:
        _collecting.reset(token)
    if problems:
        sys.modules.pop(module_name, None)  # half-registered: import it afresh next time
        raise InvalidInput("module", f"{module_name}: {'; '.join(problems)}")
    found = [value for value in vars(module).values() if isinstance(value, Registry)]
    if not found:
        raise InvalidInput("module", f"{module_name} holds no pulsecron Registry")
    return list({id(r): r for r in found}.values())


def specs_of(registries: Iterable[Registry]) -> list[JobSpec]:
    """The specs of several registries; ``InvalidInput`` if a job is defined twice."""
    specs: list[JobSpec] = []
    seen: set[tuple[str, str]] = set()
    for registry in registries:
        for spec in registry.specs():
            key = (spec.tenant, spec.name)
            if key in seen:
                raise InvalidInput("name", f"{spec.name!r} is defined twice in {spec.tenant!r}")
            seen.add(key)
            specs.append(spec)
    return specs


def load_modules(module_names: Iterable[str]) -> list[Registry]:
    """The registries of every module; one error listing every module that failed."""
    registries: list[Registry] = []
    problems: list[str] = []
    for name in module_names:
        try:
            registries.extend(registries_in(name))
        except InvalidInput as exc:
            problems.append(exc.problem)
    if problems:
        raise InvalidInput("module", "; ".join(problems))
    return registries


def export_yaml(registries: Iterable[Registry]) -> str:
    """A job file (``pulse jobs apply FILE``) holding the registries' jobs."""
    jobs = [mapping for registry in registries for mapping in registry.mappings()]
    header = "# Generated by `pulse jobs export`; apply with `pulse jobs apply FILE`.\n"
    return header + yaml.safe_dump({"jobs": jobs}, sort_keys=False, allow_unicode=True)
