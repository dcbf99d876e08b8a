"""The text of ``http:`` and ``celery:`` handler references: parsing, checking, masking and
describing them wherever a job is written or shown (the node runs them: node.handlers).

A reference is stored as text in ``jobs.handler``, so no schema change is needed:

- ``http:POST https://host/path`` and ``celery:app.tasks.rollup`` when nothing else is set;
- ``http:{...}`` / ``celery:{...}``, canonical compact JSON (sorted keys, defaults left
  out), when a job file's mapping or the CLI gives more options.

Secrets are written ``${env:NAME}`` (a header value, a broker URL) and resolved on the node
at run time (``resolve``); what is stored and shown is the reference, never the value, and a
literal credential is masked wherever a job is shown (``cluster.jobs.masking``). A broker
may also be a name of the cluster's ``celery.brokers`` (``is_broker_name``), looked up on
the node. Parsing is the same for ``pulse jobs add``, job files and the node
(tests/unit/test_handlerrefs.py).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from cluster.errors import InvalidInput
from cluster.jobs.masking import shown
from cluster.settings import mask_url
from cluster.timing.durations import format_duration, parse_duration

HTTP = "http:"
CELERY = "celery:"
PREFIXES = (HTTP, CELERY)
METHODS = ("GET", "POST", "PUT", "PATCH", "DELETE")
DEFAULT_OK = ((200, 299),)
CELERY_BROKER_ENV = "PULSE_CELERY_BROKER"
_ENV_REF = re.compile(r"\$\{env:([A-Za-z_][A-Za-z0-9_]*)\}")
_TASK = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*([.:][A-Za-z_][A-Za-z0-9_]*)*$")
_BROKER_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_-]{0,62}$")
_HEADER = re.compile(r"^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")  # an RFC 9110 token
_STATUS = re.compile(r"^\s*(\d{3})\s*(?:-\s*(\d{3})\s*)?$")
# Headers that say where a request goes or how it is framed: the URL and the client decide
# them, never a job (a shared ingress routes by Host; proxies trust X-Forwarded-*).
REFUSED_HEADERS = frozenset(
    {"host", "forwarded", "x-real-ip", "via", "connection", "te", "upgrade",
     "content-length", "transfer-encoding", "keep-alive", "trailer"}
)  # fmt: skip
REFUSED_HEADER_PREFIXES = ("x-forwarded-", "proxy-")
_HTTP_KEYS = ("method", "url", "headers", "body", "ok_status", "timeout", "keep_body")
_CELERY_KEYS = ("task", "broker", "wait", "queue")


class MissingSecret(Exception):
    """A ``${env:NAME}`` whose variable is not set on this node."""

    def __init__(self, name: str) -> None:
        super().__init__(name)
        self.name = name


def is_forwarded(ref: str) -> bool:
    return ref.startswith(PREFIXES)


def is_broker_name(reference: str) -> bool:
    """A ``broker`` that names one of the cluster's ``celery.brokers`` (``main``) rather
    than giving a URL or ``${env:NAME}``."""
    return _BROKER_NAME.match(reference) is not None


@dataclass(frozen=True)
class HttpTarget:
    method: str
    url: str
    headers: tuple[tuple[str, str], ...] = ()
    body: Any = None  # None: the run's context as JSON (see ``has_body``)
    has_body: bool = False
    ok_status: tuple[tuple[int, int], ...] = DEFAULT_OK
    timeout_s: float | None = None  # None: the job's timeout
    keep_body: bool = True  # False: only the status is kept as the run's output

    def accepts(self, status: int) -> bool:
        return any(low <= status <= high for low, high in self.ok_status)

    def encode(self) -> str:
        extra: dict[str, Any] = {}
        if self.headers:
            extra["headers"] = dict(self.headers)
        if self.has_body:
            extra["body"] = self.body
        if self.ok_status != DEFAULT_OK:
            extra["ok_status"] = _format_status(self.ok_status)
        if self.timeout_s is not None:
            extra["timeout"] = format_duration(self.timeout_s)
        if not self.keep_body:
            extra["keep_body"] = False
        if not extra:
            return f"{HTTP}{self.method} {self.url}"
        return HTTP + _compact({"method": self.method, "url": self.url, **extra})


@dataclass(frozen=True)
class CeleryTarget:
    task: str
    broker: str | None = None  # None: the node's --celery-broker; a name: celery.brokers
    wait: bool = False
    queue: str | None = None

    def encode(self) -> str:
        extra: dict[str, Any] = {}
        if self.broker is not None:
            extra["broker"] = self.broker
        if self.wait:
            extra["wait"] = True
        if self.queue is not None:
            extra["queue"] = self.queue
        if not extra:
            return CELERY + self.task
        return CELERY + _compact({"task": self.task, **extra})


def _compact(value: Mapping[str, Any]) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), sort_keys=True)


def canonical(handler: object, timeout_s: float | None = None) -> str:
    """The stored text of a handler given as text or as a job file's ``{http: {...}}`` /
    ``{celery: {...}}`` mapping; other text is returned as given (``validate_handler``
    checks it). ``timeout_s`` is the job's timeout, which an HTTP timeout must not exceed."""
    if isinstance(handler, Mapping):
        if len(handler) != 1 or next(iter(handler)) not in ("http", "celery"):
            raise InvalidInput("handler", "a mapping must be {http: {...}} or {celery: {...}}")
        kind, options = next(iter(handler.items()))
        if not isinstance(options, Mapping):
            raise InvalidInput(f"handler.{kind}", "must be a mapping")
        target: HttpTarget | CeleryTarget
        target = http_from(options) if kind == "http" else celery_from(options)
    elif isinstance(handler, str):
        if not is_forwarded(handler.strip()):
            return handler
        target = parse(handler)
    else:
        raise InvalidInput("handler", "must be a string or a mapping")
    limit_s = target.timeout_s if isinstance(target, HttpTarget) else None
    if limit_s is not None and timeout_s is not None and limit_s > timeout_s:
        raise InvalidInput("handler.http.timeout", "must not exceed the job's timeout")
    return target.encode()


def parse(ref: str) -> HttpTarget | CeleryTarget:
    """The target of a stored (or typed) ``http:`` or ``celery:`` reference."""
    ref = ref.strip()
    if ref.startswith(HTTP):
        rest = ref[len(HTTP) :].strip()
        if rest.startswith("{"):
            return http_from(_json_object(rest, "handler.http"))
        method, _, url = rest.partition(" ")
        return http_from({"method": method, "url": url.strip()})
    if ref.startswith(CELERY):
        rest = ref[len(CELERY) :].strip()
        if rest.startswith("{"):
            return celery_from(_json_object(rest, "handler.celery"))
        return celery_from({"task": rest})
    raise InvalidInput("handler", f"{ref!r} is not an http: or celery: handler")


def _json_object(text: str, field_name: str) -> Mapping[str, Any]:
    try:
        loaded = json.loads(text)
    except json.JSONDecodeError as exc:
        raise InvalidInput(field_name, f"not valid JSON ({exc.msg})") from exc
    if not isinstance(loaded, dict):
        raise InvalidInput(field_name, "must be a JSON object")
    return loaded


def _unknown(options: Mapping[str, Any], known: tuple[str, ...], where: str) -> None:
    unknown = sorted(str(k) for k in set(options) - set(known))
    if unknown:
        raise InvalidInput(f"{where}.{unknown[0]}", f"unknown key (known: {', '.join(known)})")


def _text(value: object, field_name: str) -> str:
    if not isinstance(value, str):
        raise InvalidInput(field_name, "must be a string")
    if "\x00" in value or any(ord(ch) < 32 for ch in value):
        raise InvalidInput(field_name, "must not contain control characters")
    return value


def http_from(options: Mapping[str, Any]) -> HttpTarget:
    where = "handler.http"
    _unknown(options, _HTTP_KEYS, where)
    method = _text(options.get("method", "POST"), f"{where}.method").strip().upper()
    if method not in METHODS:
        raise InvalidInput(f"{where}.method", f"{method!r} is not one of {', '.join(METHODS)}")
    if "url" not in options:
        raise InvalidInput(f"{where}.url", "missing")
    url = _text(options["url"], f"{where}.url").strip()
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise InvalidInput(f"{where}.url", f"{mask_url(url)!r} is not an http or https URL")
    if " " in url:
        raise InvalidInput(f"{where}.url", "must not contain spaces")
    headers = options.get("headers") or {}
    if not isinstance(headers, Mapping):
        raise InvalidInput(f"{where}.headers", "must be a mapping of names to values")
    pairs: list[tuple[str, str]] = []
    for name, value in headers.items():
        if not isinstance(name, str) or not _HEADER.match(name):
            raise InvalidInput(f"{where}.headers", f"{name!r} is not a header name")
        if name.lower() == "idempotency-key":
            raise InvalidInput(f"{where}.headers", "Idempotency-Key is set by Pulse")
        if refused_header(name):
            raise InvalidInput(
                f"{where}.headers", f"{name} is set from the URL and the connection, not a job"
            )
        pairs.append((name, _text(value, f"{where}.headers.{name}")))
    timeout_s = None
    if options.get("timeout") is not None:
        timeout_s = _timeout(options["timeout"], f"{where}.timeout")
    keep_body = options.get("keep_body", True)
    if not isinstance(keep_body, bool):
        raise InvalidInput(f"{where}.keep_body", "must be true or false")
    body = options.get("body")
    if "body" in options:
        try:
            json.dumps(body, allow_nan=False)
        except (TypeError, ValueError) as exc:
            raise InvalidInput(f"{where}.body", "must be JSON (or a string)") from exc
    return HttpTarget(
        method=method,
        url=url,
        headers=tuple(sorted(pairs)),
        body=body,
        has_body="body" in options,
        ok_status=parse_ok_status(options.get("ok_status", "200-299")),
        timeout_s=timeout_s,
        keep_body=keep_body,
    )


def refused_header(name: str) -> bool:
    """A header no job may set (``REFUSED_HEADERS``); a node drops one stored before."""
    lowered = name.lower()
    return lowered in REFUSED_HEADERS or lowered.startswith(REFUSED_HEADER_PREFIXES)


def _timeout(value: object, field_name: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise InvalidInput(field_name, "must be a duration such as 10s")
    seconds = parse_duration(value, field_name) if isinstance(value, str) else float(value)
    if not 0 < seconds < float("inf"):
        raise InvalidInput(field_name, "must be positive")
    return seconds


def parse_ok_status(value: object) -> tuple[tuple[int, int], ...]:
    """A status code (``204``), a range (``200-299``) or a list of them (a comma-separated
    string or a list) as sorted ranges."""
    field_name = "handler.http.ok_status"
    items: list[object]
    if isinstance(value, str):
        items = [item for item in value.split(",")]
    elif isinstance(value, list):
        items = list(value)
    else:
        items = [value]
    if not items:
        raise InvalidInput(field_name, "must name at least one status code")
    ranges: list[tuple[int, int]] = []
    for item in items:
        if isinstance(item, bool) or not isinstance(item, int | str):
            raise InvalidInput(field_name, f"{item!r} is not a status code or range")
        match = _STATUS.match(str(item))
        low = int(match.group(1)) if match else 0
        high = int(match.group(2) or low) if match else 0
        if not (match and 100 <= low <= high <= 599):
            raise InvalidInput(field_name, f"{item!r} is not a status code or range (100-599)")
        ranges.append((low, high))
    return tuple(sorted(set(ranges)))


def _format_status(ranges: tuple[tuple[int, int], ...]) -> str:
    return ",".join(str(low) if low == high else f"{low}-{high}" for low, high in ranges)


def celery_from(options: Mapping[str, Any]) -> CeleryTarget:
    where = "handler.celery"
    _unknown(options, _CELERY_KEYS, where)
    task = _text(options.get("task", ""), f"{where}.task").strip()
    if not task:
        raise InvalidInput(f"{where}.task", "celery: needs a task name")
    if not _TASK.match(task):
        raise InvalidInput(f"{where}.task", f"{task!r} is not a task name")
    broker = options.get("broker")
    if broker is not None:
        broker = _text(broker, f"{where}.broker").strip()
        if not broker:
            broker = None
        elif not (_ENV_REF.fullmatch(broker) or "://" in broker or is_broker_name(broker)):
            message = "must be a broker's name (celery.brokers), a URL or ${env:NAME}"
            raise InvalidInput(f"{where}.broker", message)
    wait = options.get("wait", False)
    if not isinstance(wait, bool):
        raise InvalidInput(f"{where}.wait", "must be true or false")
    queue = options.get("queue")
    if queue is not None:
        queue = _text(queue, f"{where}.queue").strip() or None
    return CeleryTarget(task=task, broker=broker, wait=wait, queue=queue)


def with_celery_options(handler: str, broker: str | None, wait: bool) -> str:
    """``--handler celery:...`` with the CLI's ``--celery-broker`` / ``--celery-wait``."""
    if broker is None and not wait:
        return handler
    target = parse(handler) if handler.strip().startswith(CELERY) else None
    if not isinstance(target, CeleryTarget):
        raise InvalidInput("celery-broker", "--celery-broker and --celery-wait need celery:")
    options: dict[str, Any] = {"task": target.task, "wait": wait or target.wait}
    if broker is not None or target.broker is not None:
        options["broker"] = broker if broker is not None else target.broker
    if target.queue is not None:
        options["queue"] = target.queue
    return celery_from(options).encode()


def require_broker(handler: str, environ: Mapping[str, str]) -> None:
    """Refuse a ``celery:`` job that names no broker when ``PULSE_CELERY_BROKER`` is not
    set either (the CLI's check: the node decides for good, with its own setting)."""
    if not handler.startswith(CELERY):
        return
    target = parse(handler)
    named = not isinstance(target, CeleryTarget) or target.broker is not None
    if not named and not environ.get(CELERY_BROKER_ENV):
        raise InvalidInput(
            "handler.celery.broker", f"no broker: give one in the job or set {CELERY_BROKER_ENV}"
        )


def resolve(value: str, environ: Mapping[str, str]) -> str:
    """``value`` with every ``${env:NAME}`` replaced from ``environ``; raises
    ``MissingSecret`` naming the first variable that is not set."""

    def sub(match: re.Match[str]) -> str:
        found = environ.get(match.group(1))
        if found is None:
            raise MissingSecret(match.group(1))
        return found

    return _ENV_REF.sub(sub, value)


def describe(ref: str) -> list[str]:
    """A handler as lines for ``pulse jobs show``: a summary, then one line per option,
    literal credentials masked."""
    ref = shown(ref)
    if not is_forwarded(ref):
        return [ref]
    try:
        target = parse(ref)
    except InvalidInput:
        return [ref]
    if isinstance(target, HttpTarget):
        lines = [f"{HTTP}{target.method} {target.url}"]
        lines += [f"header {name}: {value}" for name, value in target.headers]
        if target.has_body:
            lines.append(f"body {json.dumps(target.body, ensure_ascii=False)}")
        if target.ok_status != DEFAULT_OK:
            lines.append(f"ok_status {_format_status(target.ok_status)}")
        if target.timeout_s is not None:
            lines.append(f"timeout {format_duration(target.timeout_s)}")
        if not target.keep_body:
            lines.append("the answer's body is not kept")
        return lines
    lines = [CELERY + target.task]
    named = target.broker is not None and is_broker_name(target.broker)
    broker = f"{target.broker} (celery.brokers)" if named else target.broker
    lines.append(f"broker {broker or 'the node default (--celery-broker)'}")
    if target.queue is not None:
        lines.append(f"queue {target.queue}")
    if target.wait:
        lines.append("wait for the result")
    return lines
