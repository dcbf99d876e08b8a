"""What a run produced, kept within the job's ``output_limit`` (bytes of UTF-8 per part).

A run's output is one JSON object, ``{"stdout", "stderr", "result", "log", "truncated"}``
(and ``"metrics"`` when the run reported some),
written with its completion into ``runs.output``; a run that produced nothing writes NULL.
A shell stream keeps its last bytes (``TailBuffer``: a chatty command never holds more), a
Python handler's return value its first bytes (or its ``repr`` when it is not JSON), and
``ctx.log`` its newest lines (``RunLog``). Bytes that are not UTF-8 are decoded with U+FFFD,
and so are NUL (which jsonb refuses) and lone surrogates (which cannot be sent), so an
output never makes a completion fail (tests/unit/test_output.py).
"""

from __future__ import annotations

import collections
import json
import threading
from typing import Any

REPLACEMENT = "\ufffd"
# Each part: the order of the object's keys and of the names in "truncated".
PARTS = ("stdout", "stderr", "result", "log")


def storable(text: str) -> tuple[str, bytes]:
    """``text`` with NUL and lone surrogates replaced, and its UTF-8 bytes."""
    if "\x00" in text:
        text = text.replace("\x00", REPLACEMENT)
    try:
        return text, text.encode("utf-8")
    except UnicodeEncodeError:  # lone surrogates; a pair written as two becomes its character
        text = text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")
        return text, text.encode("utf-8")


def fit(text: str, limit: int, *, tail: bool) -> tuple[str, bool]:
    """``text`` made storable and cut to at most ``limit`` bytes of UTF-8 (its end with
    ``tail``, else its start), and whether it was cut. A cut never splits a character."""
    text, data = storable(text)
    if len(data) <= limit:
        return text, False
    cut = data[len(data) - limit :] if tail else data[:limit]
    return cut.decode("utf-8", "ignore"), True


class TailBuffer:
    """The last ``capacity`` bytes written, and how many were written in all."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.written = 0
        self._data = bytearray()

    def write(self, chunk: bytes) -> None:
        self.written += len(chunk)
        if len(chunk) >= self.capacity:
            self._data[:] = chunk[len(chunk) - self.capacity :]
            return
        self._data += chunk
        excess = len(self._data) - self.capacity
        if excess > 0:
            del self._data[:excess]

    @property
    def dropped(self) -> bool:
        return self.written > len(self._data)

    def text(self, limit: int) -> tuple[str | None, bool]:
        """What was kept as text of at most ``limit`` bytes (None if nothing was written),
        and whether anything written is missing from it."""
        if not self.written:
            return None, False
        data = bytes(self._data)
        if self.dropped:  # the kept bytes may start inside a character
            start = 0
            while start < min(3, len(data)) and 0x80 <= data[start] < 0xC0:
                start += 1
            data = data[start:]
        text, cut = fit(data.decode("utf-8", "replace"), limit, tail=True)
        return text, cut or self.dropped


class RunLog:
    """The lines a handler wrote with ``ctx.log``: the newest that fit in ``limit`` bytes,
    and how many older ones were dropped. Safe to call from any thread."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._lock = threading.Lock()
        self._lines: collections.deque[tuple[str, int]] = collections.deque()
        self._bytes = 0
        self._dropped = 0
        self._cut = False

    def add(self, message: object) -> None:
        if self.limit <= 0:
            return
        text = message if isinstance(message, str) else str(message)
        line, cut = fit(text, self.limit, tail=False)
        size = len(line.encode("utf-8"))
        with self._lock:
            self._cut = self._cut or cut
            self._lines.append((line, size))
            self._bytes += size
            while self._bytes > self.limit:
                _, gone = self._lines.popleft()
                self._bytes -= gone
                self._dropped += 1

    def lines(self) -> tuple[list[str] | None, bool]:
        """The lines kept (None if none was written), led by a note of how many older lines
        were dropped; and whether any line was dropped or cut."""
        with self._lock:
            if not self._lines and not self._dropped:
                return None, False
            kept = [line for line, _ in self._lines]
            if self._dropped:
                kept.insert(0, f"[{self._dropped} earlier lines dropped]")
            return kept, bool(self._dropped) or self._cut


def _safe_repr(value: Any) -> str:
    try:
        return repr(value)
    except Exception as exc:  # a __repr__ may raise anything
        return f"<{type(value).__name__} object: repr failed with {type(exc).__name__}>"


def _cleaned(value: Any) -> Any:
    """``value`` with every string (keys too) made storable."""
    if isinstance(value, str):
        return storable(value)[0]
    if isinstance(value, dict):
        return {storable(json_key(k))[0]: _cleaned(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_cleaned(v) for v in value]
    return value


def json_key(key: Any) -> str:
    """A dict key as ``json.dumps`` writes it."""
    if isinstance(key, str):
        return key
    return json.dumps(key) if isinstance(key, bool | int | float) or key is None else str(key)


def _storable(text: str) -> bool:
    if "\\u0000" in text:  # may be an escaped backslash followed by "u0000": cleaned anyway
        return False
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def result_json(value: Any, limit: int) -> tuple[str, bool]:
    """A return value as JSON text of at most ``limit`` bytes, and whether it was cut: the
    value itself when it is JSON (else its ``repr``, a string), a string of the JSON text's
    first bytes when that is longer."""
    try:
        text = json.dumps(value, ensure_ascii=False, allow_nan=False)
        if not _storable(text):
            text = json.dumps(_cleaned(value), ensure_ascii=False, allow_nan=False)
    except (TypeError, ValueError, RecursionError):  # not JSON: a type, NaN, a cycle
        text, cut = fit(_safe_repr(value), limit, tail=False)
        return json.dumps(text, ensure_ascii=False), cut
    if len(text) <= limit // 4 or len(text.encode("utf-8")) <= limit:
        return text, False
    head, _ = fit(text, limit, tail=False)
    return json.dumps(head, ensure_ascii=False), True


def compose(
    *,
    stdout: TailBuffer | None = None,
    stderr: TailBuffer | None = None,
    result: Any = None,
    log: RunLog | None = None,
    metrics: dict[str, float] | None = None,
    limit: int,
) -> str | None:
    """The output object of a run as JSON text, or None when it produced nothing (or its
    job keeps no output). Metrics are kept whatever the limit: they are bounded in number
    and size (``cluster.jobs.assertions``)."""
    if limit <= 0:
        return None if not metrics else '{"metrics": ' + json.dumps(metrics) + "}"
    parts: dict[str, str] = {}
    truncated: list[str] = []
    for name, stream in (("stdout", stdout), ("stderr", stderr)):
        if stream is not None:
            text, cut = stream.text(limit)
            if text:
                parts[name] = json.dumps(text, ensure_ascii=False)
                if cut:
                    truncated.append(name)
    if result is not None:
        parts["result"], cut = result_json(result, limit)
        if cut:
            truncated.append("result")
    if log is not None:
        lines, cut = log.lines()
        if lines is not None:
            parts["log"] = json.dumps(lines, ensure_ascii=False)
            if cut:
                truncated.append("log")
    if not parts and not metrics:
        return None
    body = ", ".join(f'"{name}": {parts.get(name, "null")}' for name in PARTS)
    kept = f', "metrics": {json.dumps(metrics)}' if metrics else ""
    return "{" + body + f', "truncated": {json.dumps(truncated)}' + kept + "}"
