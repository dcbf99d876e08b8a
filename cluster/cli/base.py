"""What every ``pulse`` command shares: one-line errors and exit codes, running a coroutine
against the job store, JSON output, time parsing, and the group class, whose commands can
be named by module and imported only when looked up (the root group's table in ``app``).

Errors become one line on stderr: exit 2 for bad input (nothing written), 1 for anything
else.
"""

from __future__ import annotations

import asyncio
import functools
import importlib
import json
import sys
from collections.abc import Callable, Coroutine, Iterator, Mapping, MutableMapping
from contextlib import contextmanager
from datetime import datetime
from typing import IO, Any, NoReturn, TypeVar

import click

from cluster import logs
from cluster.cli.audited import os_user
from cluster.errors import InvalidInput, NotFound, PulseError
from cluster.jobs.fields import DEFAULT_TENANT
from cluster.settings import (
    DEFAULT_CLUSTER,
    DEFAULT_DATABASE_URL,
    DEFAULT_REDIS_URL,
    DEFAULT_SCHEMA,
    ClusterSettings,
)
from cluster.store import JobStore
from cluster.timing.durations import format_duration, parse_duration

T = TypeVar("T")
F = TypeVar("F", bound=Callable[..., Any])


def fail(message: str, code: int = 1) -> NoReturn:
    """One line on stderr, always (a message carrying a newline is folded), then exit."""
    line = " ".join(part.strip() for part in message.splitlines() if part.strip())
    click.echo(f"pulse: {line}", err=True)
    sys.exit(code)


def run(coro: Coroutine[Any, Any, T]) -> T:
    """Run a coroutine, turning Pulse errors into one-line messages and exit codes."""
    try:
        return asyncio.run(coro)
    except InvalidInput as exc:
        fail(f"invalid {exc}", 2)
    except NotFound as exc:
        fail(str(exc), 1)
    except PulseError as exc:
        fail(str(exc), 1)


def settings_of(ctx: click.Context) -> ClusterSettings:
    settings = ctx.find_object(ClusterSettings)
    assert settings is not None
    return settings


# -- options every command takes, before or after its name ----------------------------------

_GLOBAL = "pulse.global"  # ctx.meta key: name -> (given on the command line, value)


_LOGGING = "pulse.logging"  # ctx.meta key: (format, level) as configured
DEFAULT_LOG_FORMAT = "text"
DEFAULT_LOG_LEVEL = "INFO"


def logging_of(ctx: click.Context) -> tuple[str, str]:
    """The log format and level this command configured (for the processes it starts)."""
    fmt, level = ctx.meta[_LOGGING]
    return str(fmt), str(level)


def _remember(ctx: click.Context, param: click.Parameter, value: Any) -> None:
    """Keep a shared option's value: a flag beats the environment, and a flag after the
    command beats one before it (the command's context is parsed last)."""
    if value is None or param.name is None:
        return
    flag = ctx.get_parameter_source(param.name) == click.core.ParameterSource.COMMANDLINE
    given = ctx.meta.setdefault(_GLOBAL, {})
    if flag or not given.get(param.name, (False, None))[0]:
        given[param.name] = (flag, value)


def global_options() -> list[click.Parameter]:
    """New instances of the shared options (a click parameter belongs to one command)."""

    def option(flag: str, envvar: str, help: str, **kw: Any) -> click.Option:
        return click.Option(
            [flag], envvar=envvar, help=help, expose_value=False, callback=_remember, **kw
        )

    return [
        option(
            "--database-url",
            "PULSE_DATABASE_URL",
            f"Postgres URL [env PULSE_DATABASE_URL; default {DEFAULT_DATABASE_URL}].",
        ),
        option(
            "--redis-url",
            "PULSE_REDIS_URL",
            f"Redis URL [env PULSE_REDIS_URL; default {DEFAULT_REDIS_URL}].",
        ),
        option("--schema", "PULSE_SCHEMA", f"Postgres schema [default {DEFAULT_SCHEMA}]."),
        option(
            "--cluster",
            "PULSE_CLUSTER",
            f"Cluster name: Redis key prefix and lock namespace [default {DEFAULT_CLUSTER}].",
        ),
        option(
            "--log-format",
            "PULSE_LOG_FORMAT",
            f"Log lines as text or JSON [default {DEFAULT_LOG_FORMAT}].",
            type=click.Choice(["text", "json"]),
        ),
        option("--log-level", "PULSE_LOG_LEVEL", f"Log level [default {DEFAULT_LOG_LEVEL}]."),
    ]


def configure(ctx: click.Context) -> None:
    """Configure logging and build the cluster settings from the shared options."""
    given = {name: value for name, (_, value) in ctx.meta.get(_GLOBAL, {}).items()}
    fmt = given.get("log_format", DEFAULT_LOG_FORMAT)
    level = given.get("log_level", DEFAULT_LOG_LEVEL)
    logs.configure(fmt, level)
    ctx.meta[_LOGGING] = (fmt, level)
    try:
        settings = ClusterSettings(
            database_url=given.get("database_url", DEFAULT_DATABASE_URL),
            redis_url=given.get("redis_url", DEFAULT_REDIS_URL),
            schema=given.get("schema", DEFAULT_SCHEMA),
            cluster=given.get("cluster", DEFAULT_CLUSTER),
        ).validate()
    except InvalidInput as exc:
        fail(f"invalid {exc}", 2)
    ctx.find_root().obj = settings


def with_store(
    fn: Callable[..., Coroutine[Any, Any, T]],
) -> Callable[..., T]:
    """Run ``fn(store, **kwargs)`` against an admin connection of the current cluster."""

    @functools.wraps(fn)
    @click.pass_context
    def wrapper(ctx: click.Context, /, **kwargs: Any) -> T:
        async def go() -> T:
            async with JobStore.open(settings_of(ctx)) as store:
                await store.revisions.act_as(os_user(), "cli")  # for the revisions of its changes
                return await fn(store, **kwargs)

        return run(go())

    return wrapper


tenant_option = click.option(
    "--tenant", default=DEFAULT_TENANT, show_default=True, help="Tenant the job belongs to."
)


def duration_option(flag: str, default_s: float, help: str, **kw: Any) -> Callable[[F], F]:
    """A duration option (``30s``, ``5m``) whose default is the settings' constant."""
    return click.option(
        flag, default=format_duration(default_s), show_default=True, help=help, **kw
    )


def seconds(value: str, field: str) -> float:
    """A duration option's value in seconds; bad input is one line and exit 2."""
    try:
        return parse_duration(value, field)
    except InvalidInput as exc:
        fail(f"invalid {exc}", 2)


def emit_json(data: Any) -> None:
    click.echo(json.dumps(data, indent=2, ensure_ascii=False, sort_keys=False))


def parse_time(value: str | None, field: str) -> datetime | None:
    if value is None:
        return None
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError:
        fail(f"invalid {field}: {value!r} is not an ISO 8601 time", 2)
    if parsed.tzinfo is None:
        fail(f"invalid {field}: {value!r} needs a UTC offset, e.g. 2026-01-01T00:00:00+00:00", 2)
    return parsed


class OneLineUsageError(click.UsageError):
    """A usage error shown like every other bad input: one line on stderr, exit 2."""

    def show(self, file: IO[Any] | None = None) -> None:
        hint = f" (see '{self.ctx.command_path} --help')" if self.ctx is not None else ""
        click.echo(f"pulse: {self.format_message()}{hint}", file=file, err=True)


class PulseCommand(click.Command):
    """A command that takes the shared options too, and configures from them when invoked."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.params.extend(global_options())

    def invoke(self, ctx: click.Context) -> Any:
        configure(ctx)
        return super().invoke(ctx)


class LazyCommands(MutableMapping[str, click.Command]):
    """A group's commands by name (its ``commands``), some given as ``"module:attribute"``
    and imported when first looked up (click's lazily loaded subcommands). Listing the names
    imports nothing; looking a command up imports its module: running it does, and so does
    the help, which shows every command's short help."""

    def __init__(self, loaded: Mapping[str, click.Command], lazy: Mapping[str, str]) -> None:
        self.loaded = dict(loaded)
        self.lazy = dict(lazy)

    def __getitem__(self, name: str) -> click.Command:
        if name not in self.loaded:
            target = self.lazy[name]  # KeyError: no such command
            module, _, attribute = target.partition(":")
            command = getattr(importlib.import_module(module), attribute)
            if not isinstance(command, click.Command):
                raise TypeError(f"{target} is not a click command")
            self.loaded[name] = command
        return self.loaded[name]

    def __setitem__(self, name: str, command: click.Command) -> None:
        self.loaded[name] = command

    def __delitem__(self, name: str) -> None:
        if name not in self:
            raise KeyError(name)
        self.loaded.pop(name, None)
        self.lazy.pop(name, None)

    def __contains__(self, name: object) -> bool:  # without importing (Mapping's would)
        return name in self.loaded or name in self.lazy

    def __iter__(self) -> Iterator[str]:
        return iter(sorted(self.loaded.keys() | self.lazy.keys()))

    def __len__(self) -> int:
        return len(self.loaded.keys() | self.lazy.keys())


class PulseGroup(click.Group):
    """Every group of ``pulse``: its commands take the shared options, and click's own usage
    errors (a missing option, a value out of range, an unknown command) become one line too,
    instead of usage text over three lines.

    ``lazy_commands`` names commands by ``"module:attribute"``, each imported when looked up.
    The table lives in ``commands`` itself (``LazyCommands``), which click's ``list_commands``
    and ``get_command`` read, rather than in overrides of those two as click's docs show it:
    so whatever else reads ``commands`` (click's "did you mean", a walk of the command tree)
    sees every command too."""

    command_class = PulseCommand
    group_class = type  # sub-groups are PulseGroups as well

    def __init__(
        self, *args: Any, lazy_commands: Mapping[str, str] | None = None, **kwargs: Any
    ) -> None:
        super().__init__(*args, **kwargs)
        self.commands = LazyCommands(self.commands, lazy_commands or {})

    def make_context(
        self,
        info_name: str | None,
        args: list[str],
        parent: click.Context | None = None,
        **extra: Any,
    ) -> click.Context:
        with _one_line_usage_errors():
            return super().make_context(info_name, args, parent, **extra)

    def invoke(self, ctx: click.Context) -> Any:
        with _one_line_usage_errors():
            return super().invoke(ctx)


@contextmanager
def _one_line_usage_errors() -> Iterator[None]:
    try:
        yield
    except OneLineUsageError:
        raise
    except click.UsageError as exc:
        if type(exc).__name__ == "NoArgsIsHelpError":  # a bare group prints its help
            raise
        raise OneLineUsageError(exc.format_message(), exc.ctx) from exc
