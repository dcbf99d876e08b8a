"""The documentation's examples that show output, found by their marker and run as a page.

A fenced block right after ``<!-- example -->`` is run: each ``$ pulse ...`` line (a
trailing ``\\`` continues it, a ``# comment`` after it is dropped) is a command, and the
lines up to the next ``$`` are what it prints. ``<!-- example: file NAME -->`` before a
block writes it to ``NAME`` in the page's working directory, for the commands after it;
``<!-- example: setup`` followed by commands, one a line, and ``-->`` runs them unseen. A
page's examples run in order against one cluster, so each builds on the ones before.

A block of output is a pattern, so that what differs between two runs (ids, instants) need
not be written down: an instant (``2026-03-01T13:00:00+00:00``, ``Thu 2026-12-24
02:30:00``, ``2026-03-01 13:00:00+0000``) matches any instant of its form, an id any id,
``...`` in a line any text, a line that is only ``...`` any lines, and a run of spaces any
run (tables' columns widen with their values). Everything else must be printed as written.

``<!-- example: not run: REASON -->`` marks a block that shows output but cannot run here
(it needs nodes, a web server, a chaos run); tests/integration/test_docs_examples.py
requires one of the two markers on every block that shows a ``$`` prompt and output.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path

MARK = re.compile(r"^<!-- example(?::\s*(?P<kind>file|setup|not run)\b(?P<rest>.*?))?\s*(-->)?$")
FENCE = re.compile(r"^```")

_INSTANT = r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(?:\.\d+)?(?:Z|[+-]\d{2}:\d{2})"
_WALL = (  # a weekday and wall time, or a table's instant
    r"(?:(?:Mon|Tue|Wed|Thu|Fri|Sat|Sun) \d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}"
    r"|\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}(?:\.\d+)?[+-]\d{4})"
)
_ID = r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"
_PLACEHOLDERS = re.compile(rf"({_INSTANT}|{_WALL}|{_ID}|\.\.\.| +)")


@dataclass
class Command:
    line: int  # in the page, for the failure's message
    args: list[str]
    expected: list[str] = field(default_factory=list)
    checked: bool = True  # False: a setup command, its output unseen


@dataclass
class Page:
    path: Path
    files: dict[str, str] = field(default_factory=dict)  # written before the first command
    steps: list[Command | tuple[str, str]] = field(default_factory=list)  # or (file, text)
    not_run: list[tuple[int, str]] = field(default_factory=list)  # (line, reason)
    unmarked: list[int] = field(default_factory=list)  # blocks with a prompt, no marker


def _commands(lines: list[str], first: int) -> list[Command]:
    found: list[Command] = []
    pending = ""
    for offset, text in enumerate(lines):
        if pending or text.startswith("$ "):
            pending += text.removeprefix("$ ") if not pending else " " + text.strip()
            if pending.endswith("\\"):
                pending = pending[:-1]
                continue
            found.append(Command(first + offset, shlex.split(pending, comments=True)))
            pending = ""
        elif found:
            found[-1].expected.append(text)
    return found


def read_page(path: Path) -> Page:
    """A page's examples, in order."""
    page = Page(path)
    lines = path.read_text(encoding="utf-8").splitlines()
    i = 0
    marker: re.Match[str] | None = None
    while i < len(lines):
        text = lines[i]
        found = MARK.match(text)
        if found and found.group("kind") == "setup":
            end = next(k for k in range(i, len(lines)) if lines[k].strip() == "-->")
            for k in range(i + 1, end):
                if lines[k].strip():
                    page.steps.append(Command(k + 1, shlex.split(lines[k]), checked=False))
            i = end + 1
            continue
        if found:
            marker = found
            i += 1
            continue
        if FENCE.match(text):
            end = next(k for k in range(i + 1, len(lines)) if FENCE.match(lines[k]))
            body = lines[i + 1 : end]
            kind = marker.group("kind") if marker else None
            if marker is not None and kind is None:
                page.steps.extend(_commands(body, i + 2))
            elif marker is not None and kind == "file":
                page.steps.append((marker.group("rest").strip(), "\n".join(body) + "\n"))
            elif marker is not None and kind == "not run":
                page.not_run.append((i + 1, marker.group("rest").strip(" :")))
            elif any(c.expected for c in _commands(body, i + 2)):  # shows output
                page.unmarked.append(i + 1)
            marker = None
            i = end + 1
            continue
        if text.strip():
            marker = None
        i += 1
    return page


def _line_pattern(expected: str) -> re.Pattern[str]:
    parts = []
    for piece in _PLACEHOLDERS.split(expected.rstrip()):
        if not piece:
            continue
        if piece == "...":
            parts.append(".*?")
        elif piece.isspace():
            parts.append(r"\s+")
        elif re.fullmatch(_INSTANT, piece):
            parts.append(_INSTANT)
        elif re.fullmatch(_WALL, piece):
            parts.append(_WALL)
        elif re.fullmatch(_ID, piece):
            parts.append(_ID)
        else:
            parts.append(re.escape(piece))
    return re.compile("".join(parts))


def matches(expected: list[str], printed: list[str]) -> bool:
    """Whether ``printed`` is what ``expected`` shows (placeholders as above)."""
    want = [e for e in expected if e.strip()]
    got = [p for p in printed if p.strip()]

    def at(w: int, g: int) -> bool:
        if w == len(want):
            return g == len(got)
        if want[w].strip() == "...":
            return any(at(w + 1, k) for k in range(g, len(got) + 1))
        return (
            g < len(got)
            and bool(_line_pattern(want[w]).fullmatch(got[g].rstrip()))
            and at(w + 1, g + 1)
        )

    return at(0, 0)
