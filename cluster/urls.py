"""The URLs of Pulse's two stores: which forms are accepted, how they are masked and split.

Postgres URLs go to libpq unchanged, so every libpq form works, multi-host ones included
(``postgresql://h1:5432,h2:5432/db?target_session_attrs=read-write``). Redis URLs are
``redis://``, ``rediss://``, ``unix://`` or ``redis+sentinel://h1:26379,h2:26379/service[/db]``
(the primary is asked of the sentinels). ``urllib`` cannot read a host list (its ``port``
raises), so hosts are split here, and nothing else in Pulse takes a store URL apart.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from urllib.parse import parse_qsl, quote, unquote, urlsplit, urlunsplit

from cluster.errors import InvalidInput

POSTGRES_SCHEMES = ("postgresql", "postgres")
REDIS_SCHEMES = ("redis", "rediss", "unix")
SENTINEL_SCHEME = "redis+sentinel"
DEFAULT_SENTINEL_PORT = 26379

_SECRET_QUERY = re.compile(r"((?:^|&)(?:password|sentinel_password)=)[^&]*")


@dataclass(frozen=True)
class SentinelTarget:
    """What a ``redis+sentinel://`` URL names: the sentinels, the service and its database."""

    sentinels: tuple[tuple[str, int], ...]
    service: str
    db: int
    username: str | None
    password: str | None  # the Redis servers' (the primary's and replicas')
    sentinel_password: str | None


def mask_url(url: str) -> str:
    """The URL with any password replaced by ``***``, safe for logs and output.

    Works on host lists too: only the user-info part and password query parameters change.
    """
    parts = urlsplit(url)
    netloc = parts.netloc
    userinfo, at, hosts = netloc.rpartition("@")
    if at and ":" in userinfo:
        netloc = f"{userinfo.split(':', 1)[0]}:***@{hosts}"
    query = _SECRET_QUERY.sub(r"\1***", parts.query)
    if netloc == parts.netloc and query == parts.query:
        return url
    return urlunsplit(parts._replace(netloc=netloc, query=query))


def host_list(url: str) -> list[tuple[str, int | None]]:
    """The ``(host, port)`` pairs of a URL's host list, in order; empty when it names none.

    Raises InvalidInput for an empty entry (``h1,,h2``) or a port that is not a number."""
    hosts = urlsplit(url).netloc.rpartition("@")[2]
    if not hosts:
        return []
    found = []
    for entry in hosts.split(","):
        host, port = _host_port(entry)
        if not host:
            raise InvalidInput("url", f"{mask_url(url)!r} has an empty host in its host list")
        found.append((host, port))
    return found


def _host_port(entry: str) -> tuple[str, int | None]:
    if entry.startswith("["):  # [::1]:5432
        host, _, rest = entry[1:].partition("]")
        port = rest.removeprefix(":")
    elif entry.count(":") == 1:
        host, _, port = entry.partition(":")
    else:
        host, port = entry, ""
    if not port:
        return host, None
    if not port.isdigit() or not 0 < int(port) < 65536:
        raise InvalidInput("url", f"{entry!r}: the port is not a TCP port")
    return host, int(port)


def check_database_url(url: str) -> None:
    """Raise InvalidInput unless ``url`` is a Postgres URL naming at least one host."""
    parts = urlsplit(url)
    if parts.scheme not in POSTGRES_SCHEMES:
        raise InvalidInput(
            "database_url", f"{_scheme(url)} is not a Postgres URL: use postgresql://"
        )
    try:
        hosts = host_list(url)
    except InvalidInput as exc:
        raise InvalidInput("database_url", exc.problem) from None
    # libpq may also take its hosts from ?host= (a socket directory, or a list of its own).
    if not hosts and "host" not in dict(parse_qsl(parts.query)):
        raise InvalidInput("database_url", f"{mask_url(url)!r} names no host")


def is_multi_host(url: str) -> bool:
    """True when libpq will try more than one server for ``url``."""
    query_hosts = dict(parse_qsl(urlsplit(url).query)).get("host", "")
    return len(host_list(url)) > 1 or "," in query_hosts


def check_redis_url(url: str) -> None:
    """Raise InvalidInput unless ``url`` is a Redis or Redis Sentinel URL with a host."""
    parts = urlsplit(url)
    if parts.scheme == SENTINEL_SCHEME:
        sentinel_target(url)
        return
    if parts.scheme not in REDIS_SCHEMES:
        raise InvalidInput(
            "redis_url",
            f"{_scheme(url)} is not a Redis URL: use redis://, rediss://, unix:// "
            "or redis+sentinel://",
        )
    if parts.scheme != "unix":
        try:
            hosts = host_list(url)
        except InvalidInput as exc:
            raise InvalidInput("redis_url", exc.problem) from None
        if len(hosts) != 1:
            raise InvalidInput(
                "redis_url",
                f"{mask_url(url)!r} must name one host (a host list needs redis+sentinel://)",
            )


def sentinel_target(url: str) -> SentinelTarget:
    """The parts of a ``redis+sentinel://[user:password@]h1:port,h2:port/service[/db]`` URL."""
    parts = urlsplit(url)
    if parts.scheme != SENTINEL_SCHEME:
        raise InvalidInput("redis_url", f"{_scheme(url)} is not a redis+sentinel:// URL")
    try:
        hosts = host_list(url)
    except InvalidInput as exc:
        raise InvalidInput("redis_url", exc.problem) from None
    if not hosts:
        raise InvalidInput("redis_url", f"{mask_url(url)!r} names no sentinel")
    path = [unquote(p) for p in parts.path.split("/") if p]
    if not path or len(path) > 2:
        raise InvalidInput("redis_url", "a sentinel URL ends in /service_name or /service_name/db")
    db = 0
    if len(path) == 2:
        if not path[1].isdigit():
            raise InvalidInput("redis_url", f"{path[1]!r} is not a database number")
        db = int(path[1])
    userinfo, at, _ = parts.netloc.rpartition("@")
    username: str | None = None
    password: str | None = None
    if at:
        user, colon, secret = userinfo.partition(":")
        username = unquote(user) or None
        password = unquote(secret) if colon else None
    query = dict(parse_qsl(parts.query))
    return SentinelTarget(
        sentinels=tuple((host, port or DEFAULT_SENTINEL_PORT) for host, port in hosts),
        service=path[0],
        db=db,
        username=username,
        password=password,
        sentinel_password=query.get("sentinel_password"),
    )


def _scheme(url: str) -> str:
    scheme = urlsplit(url).scheme
    return f"{scheme}://" if scheme else "a URL without a scheme"


def with_login(url: str, user: str, password: str) -> str:
    """``url`` logging in as ``user`` with ``password`` (URL-quoted), hosts and the rest kept."""
    parts = urlsplit(url)
    hosts = parts.netloc.rpartition("@")[2]
    login = f"{quote(user, safe='')}:{quote(password, safe='')}"
    return urlunsplit(parts._replace(netloc=f"{login}@{hosts}"))
