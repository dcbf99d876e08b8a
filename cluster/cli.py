"""The ``pulse`` command line: thin click commands over the job store.

Each command parses its input, builds settings, and calls the Python API. Errors become
one line on stderr: exit 2 for bad input (nothing written), 1 for anything else.
``node/cli.py`` adds the commands that run node processes to the same group.
"""

from __future__ import annotations

import asyncio
import functools
import json
import sys
from collections.abc import Callable, Coroutine, Iterator
from contextlib import contextmanager
from datetime import datetime
from typing import IO, Any, NoReturn, TypeVar

import click

from cluster import logs
from cluster.errors import InvalidInput, NotFound, PulseError
from cluster.jobs import JobStore
from cluster.settings import ClusterSettings

T = TypeVar("T")


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


def with_store(
    fn: Callable[..., Coroutine[Any, Any, T]],
) -> Callable[..., T]:
    """Run ``fn(store, **kwargs)`` against an admin connection of the current cluster."""

    @functools.wraps(fn)
    @click.pass_context
    def wrapper(ctx: click.Context, /, **kwargs: Any) -> T:
        async def go() -> T:
            async with JobStore.open(settings_of(ctx)) as store:
                return await fn(store, **kwargs)

        return run(go())

    return wrapper


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


class PulseGroup(click.Group):
    """The root group: click's own usage errors (a missing option, a value out of range, an
    unknown command) become one line too, instead of usage text over three lines."""

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


@click.group(
    cls=PulseGroup,
    context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100},
)
@click.option(
    "--database-url",
    envvar="PULSE_DATABASE_URL",
    default=None,
    help="Postgres URL [env PULSE_DATABASE_URL; default postgresql://postgres@127.0.0.1:5432/postgres].",
)
@click.option(
    "--redis-url",
    envvar="PULSE_REDIS_URL",
    default=None,
    help="Redis URL [env PULSE_REDIS_URL; default redis://127.0.0.1:6379/0].",
)
@click.option(
    "--schema", envvar="PULSE_SCHEMA", default=None, help="Postgres schema [default pulse]."
)
@click.option(
    "--cluster",
    envvar="PULSE_CLUSTER",
    default=None,
    help="Cluster name: Redis key prefix and lock namespace [default pulse].",
)
@click.option(
    "--log-format",
    envvar="PULSE_LOG_FORMAT",
    type=click.Choice(["text", "json"]),
    default="text",
    show_default=True,
)
@click.option("--log-level", envvar="PULSE_LOG_LEVEL", default="INFO", show_default=True)
@click.version_option(package_name="pulsecron", prog_name="pulse")
@click.pass_context
def cli(
    ctx: click.Context,
    database_url: str | None,
    redis_url: str | None,
    schema: str | None,
    cluster: str | None,
    log_format: str,
    log_level: str,
) -> None:
    """Pulse: a distributed cron scheduler on Postgres and Redis."""
    logs.configure(log_format, log_level)
    try:
        ctx.obj = ClusterSettings.from_env(
            database_url=database_url, redis_url=redis_url, schema=schema, cluster=cluster
        )
    except InvalidInput as exc:
        fail(f"invalid {exc}", 2)


@cli.command()
@click.option(
    "--shards",
    type=int,
    envvar="PULSE_SHARDS",
    default=None,
    help="Number of shards, fixed at the first init [default 256].",
)
@with_store
async def init(store: JobStore, shards: int | None) -> None:
    """Create or upgrade the database schema (safe to repeat)."""
    result = await store.init(shards)
    applied = ", ".join(f"{v:03d}" for v in result.applied) or "none"
    click.echo(
        f"schema {store._settings.schema} at version {result.version} "
        f"(applied: {applied}); {result.shards} shards"
    )


def register() -> None:
    """Attach the command modules (kept separate so each stays small)."""
    from cluster import cli_chaos, cli_jobs, cli_schedule, cli_status, cli_up  # noqa: F401


register()


def main() -> None:
    cli(prog_name="pulse")
