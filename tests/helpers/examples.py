"""The documentation's blocks that show output, found by their marker: run as a page, or
read by the test that produces that output for real.

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
run (tables' columns widen with their values). Everything else must be printed as written,
unless the test asks for ``numbers=True``: then any number matches any number (a chaos
run's figures).

Output that needs nodes, a web server or a delivery is produced by a test that already
makes it: ``<!-- output: KEY -->`` before the block, and that test reads the block with
``documented("docs/PAGE.md#KEY")`` and compares it (``matches`` for text, ``json_differs``
for a JSON answer or payload). ``<!-- example: not run: REASON -->`` marks output that no
test can produce here.

A block shows output, and so carries one of these markers, when it has a ``$`` prompt
followed by lines that are not prompts, or when its fence names no language or ``json``
(tests/integration/test_docs_examples.py checks it, and that no ``output`` key is left
unread by a test). Blocks that show no output name their language: ``sh`` for commands,
``yaml``, ``python``, ``sql`` or ``crontab`` for files, ``text`` for a diagram.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.helpers import REPO

MARK = re.compile(r"^<!-- example(?::\s*(?P<kind>file|setup|not run)\b(?P<rest>.*?))?\s*(-->)?$")
OUTPUT = re.compile(r"^<!-- output: (?P<key>[\w-]+) -->$")
FENCE = re.compile(r"^```")
OUTPUT_LANGUAGES = ("", "json")  # a fence naming one of these shows output

_INSTANT = r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(?:\.\d+)?(?:Z|[+-]\d{2}:\d{2})"
_WALL = (  # a weekday and wall time, or a table's instant
    r"(?:(?:Mon|Tue|Wed|Thu|Fri|Sat|Sun) \d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}"
    r"|\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}(?:\.\d+)?[+-]\d{4})"
)
_ID = r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"
_PLACEHOLDERS = re.compile(rf"({_INSTANT}|{_WALL}|{_ID}|\.\.\.| +)")
_NUMBER = r"\d+(?:\.\d+)?"


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
    outputs: dict[str, list[str]] = field(default_factory=dict)  # <!-- output: KEY -->
    unmarked: list[int] = field(default_factory=list)  # blocks that show output, no marker


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
    """A page's examples in order, its blocks marked ``output``, and those that need a marker."""
    page = Page(path)
    lines = path.read_text(encoding="utf-8").splitlines()
    i = 0
    marker: re.Match[str] | None = None
    while i < len(lines):
        text = lines[i]
        found = MARK.match(text) or OUTPUT.match(text)
        if found and found.groupdict().get("kind") == "setup":
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
            kind = marker.groupdict().get("kind") if marker else None
            if marker is not None and "key" in marker.groupdict():
                assert marker.group("key") not in page.outputs, f"{path}:{i}: a key twice"
                page.outputs[marker.group("key")] = body
            elif marker is not None and kind is None:
                page.steps.extend(_commands(body, i + 2))
            elif marker is not None and kind == "file":
                page.steps.append((marker.group("rest").strip(), "\n".join(body) + "\n"))
            elif marker is not None and kind == "not run":
                page.not_run.append((i + 1, marker.group("rest").strip(" :")))
            elif text[3:].strip() in OUTPUT_LANGUAGES or any(
                c.expected for c in _commands(body, i + 2)
            ):  # shows output
                page.unmarked.append(i + 1)
            marker = None
            i = end + 1
            continue
        if text.strip():
            marker = None
        i += 1
    return page


def _literal(piece: str, numbers: bool) -> str:
    if not numbers:
        return re.escape(piece)
    return _NUMBER.join(re.escape(text) for text in re.split(_NUMBER, piece))


def _line_pattern(expected: str, numbers: bool = False) -> re.Pattern[str]:
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
            parts.append(_literal(piece, numbers))
    return re.compile("".join(parts))


def matches(expected: list[str], printed: list[str], numbers: bool = False) -> bool:
    """Whether ``printed`` is what ``expected`` shows (placeholders as above)."""
    want = [
        _line_pattern(e, numbers) if e.strip() != "..." else None for e in expected if e.strip()
    ]
    got = [p.rstrip() for p in printed if p.strip()]

    def at(w: int, g: int) -> bool:
        if w == len(want):
            return g == len(got)
        line = want[w]
        if line is None:
            return any(at(w + 1, k) for k in range(g, len(got) + 1))
        return g < len(got) and bool(line.fullmatch(got[g])) and at(w + 1, g + 1)

    return at(0, 0)


def documented(ref: str) -> list[str]:
    """The lines of the block marked ``<!-- output: KEY -->`` in ``PAGE#KEY`` (a path from
    the repository's root)."""
    page, key = ref.split("#")
    return read_page(REPO / page).outputs[key]


def json_differs(shown: Any, sent: Any, where: str = "$") -> list[str]:
    """Where ``sent`` (a decoded JSON value) has not the shape the page shows: the same keys
    (any more where the page shows ``"...": "..."``), null where it shows null, the same
    types, lists element by element against the page's first element, and a string shown
    with an instant or an id in it of that form. Other values are the page's examples."""
    if isinstance(shown, dict) and isinstance(sent, dict):
        more = shown.get("...") == "..."
        keys = [k for k in shown if k != "..."]
        wrong = [f"{where}: no key {k!r}" for k in keys if k not in sent]
        wrong += [f"{where}: key {k!r} not shown" for k in sent if k not in shown and not more]
        for k in keys:
            if k in sent:
                wrong += json_differs(shown[k], sent[k], f"{where}.{k}")
        return wrong
    if isinstance(shown, list) and isinstance(sent, list):
        if not shown:
            return [] if not sent else [f"{where}: {len(sent)} items, the page shows none"]
        return [
            w for n, item in enumerate(sent) for w in json_differs(shown[0], item, f"{where}[{n}]")
        ]
    if shown is None or sent is None or isinstance(shown, bool) or isinstance(sent, bool):
        return (
            []
            if shown is sent or (type(shown) is type(sent) is bool)
            else [f"{where}: {sent!r}, the page shows {shown!r}"]
        )
    if isinstance(shown, int | float) and isinstance(sent, int | float):
        return []
    if isinstance(shown, str) and isinstance(sent, str):
        formed = re.search(rf"{_INSTANT}|{_ID}", shown) is None or _line_pattern(shown).fullmatch(
            sent
        )
        return [] if formed else [f"{where}: {sent!r} has not the form of {shown!r}"]
    return [f"{where}: {sent!r}, the page shows {shown!r}"]
