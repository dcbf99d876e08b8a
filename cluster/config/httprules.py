"""``http:`` entries of the API's allow-list, parsed into parts rather than matched as text:
``http:POST https://hooks.example.com/billing/`` allows POSTs to that scheme, host and port
under that path, and nothing a text glob would also have matched
(``https://hooks.example.com.evil.io/``). Also the checks of a job's URL written over the
API: no userinfo, no dot segments, no encoded slashes, an ASCII host.
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass
from urllib.parse import SplitResult, unquote, urlsplit

from cluster.errors import InvalidInput
from cluster.jobs.handlerrefs import METHODS

HTTP = "http:"
DEFAULT_PORTS = {"http": 80, "https": 443}
_HOST = re.compile(
    r"^(\*\.)?[a-z0-9](?:[a-z0-9-]*[a-z0-9])?(?:\.[a-z0-9](?:[a-z0-9-]*[a-z0-9])?)*$"
)
_HINT = "like 'http:POST https://hooks.example.com/billing/' or 'http:https://host:8443/'"


@dataclass(frozen=True)
class HttpRule:
    """Methods (None: any), scheme, host (``*.`` first: any subdomain), port, path prefix."""

    methods: frozenset[str] | None
    scheme: str
    host: str
    port: int
    prefix: str

    def allows(self, method: str, url: str) -> bool:
        """Whether a job URL already checked by ``job_url`` is inside this rule."""
        parts = urlsplit(url)
        if self.methods is not None and method not in self.methods:
            return False
        if parts.scheme != self.scheme or _port(parts) != self.port:
            return False
        host = (parts.hostname or "").lower()
        if self.host.startswith("*."):
            suffix = self.host[1:]
            if not (host.endswith(suffix) and len(host) > len(suffix)):
                return False
        elif host != self.host:
            return False
        return _under(parts.path or "/", self.prefix)


def _under(path: str, prefix: str) -> bool:
    if prefix.endswith("/"):
        return path.startswith(prefix)
    return path == prefix or path.startswith(prefix + "/")


def _port(parts: SplitResult) -> int:
    return parts.port or DEFAULT_PORTS[parts.scheme]


def parse_rule(pattern: str, field_name: str) -> HttpRule:
    """An ``http:[METHOD ]URL`` entry; ``InvalidInput`` naming ``field_name`` if it is not
    one (a text glob of an older release, say)."""
    rest = pattern[len(HTTP) :].strip()
    method, _, url = rest.partition(" ") if " " in rest else ("", "", rest)
    url = url.strip()
    methods = None
    if method:
        if method.upper() not in METHODS:
            raise InvalidInput(field_name, f"{pattern!r}: {method!r} is not one of {METHODS}")
        methods = frozenset({method.upper()})
    problem = None
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        problem = "is not a URL"
    else:
        if parts.scheme not in DEFAULT_PORTS:
            problem = "needs an http:// or https:// URL"
        elif "@" in parts.netloc:
            problem = "must not hold a user or password"
        elif parts.query or parts.fragment or "*" in parts.path:
            problem = "takes a path prefix, not a query, fragment or glob"
        elif not _HOST.match(parts.hostname or "") and not _is_ip(parts.hostname or ""):
            problem = "needs a host name (a '*.' first label allows its subdomains)"
    if problem is not None:
        raise InvalidInput(field_name, f"{pattern!r} {problem}: write it {_HINT}")
    return HttpRule(
        methods=methods,
        scheme=parts.scheme,
        host=(parts.hostname or "").lower(),
        port=port or DEFAULT_PORTS[parts.scheme],
        prefix=parts.path or "/",
    )


def _is_ip(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


def job_url(url: str, field_name: str) -> None:
    """Refuse a job URL written over the API that parsers could read two ways."""
    problem = None
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - raises ValueError on a bad port
    except ValueError:
        parts, problem = None, "is not a URL with a valid port"
    if parts is not None:
        segments = [unquote(s) for s in parts.path.split("/")]
        if "@" in parts.netloc or parts.username is not None:
            problem = "must not hold a user or password (userinfo)"
        elif "\\" in url or any(s in (".", "..") for s in segments):
            problem = "must not hold backslashes or '.'/'..' path segments"
        elif re.search(r"%(2f|5c|2e)", parts.path, re.IGNORECASE):
            problem = "must not hold encoded slashes or dots in its path"
        elif not (parts.hostname or "").isascii():
            problem = "needs an ASCII host (write an international name in its xn-- form)"
    if problem is not None:
        raise InvalidInput(field_name, f"the URL {problem}")
