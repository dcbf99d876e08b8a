"""The documentation's examples that show output print what the pages say: each page's
marked blocks run in order as `pulse` commands against a fresh cluster of their own, and
what each prints is compared with the page, ids and instants as placeholders
(tests/helpers/examples.py says how blocks are marked and matched). Commands run
in-process, as an operator named alice, in a directory where the page's example files are
written; no node runs, so a page shows no output that needs one."""

from __future__ import annotations

from pathlib import Path

import pytest

from cluster.settings import ClusterSettings
from tests.helpers import REPO
from tests.helpers.cli import initialised_pulse
from tests.helpers.examples import Command, matches, read_page

pytestmark = pytest.mark.timeout(120)

PAGES = [
    "README.md",
    "docs/alerts.md",
    "docs/import.md",
    "docs/jobs.md",
    "docs/retention.md",
    "docs/time.md",
    "docs/web.md",
]
OPERATOR = "alice"


@pytest.mark.parametrize("page", PAGES)
def test_a_pages_examples_print_what_it_shows(
    page: str, settings: ClusterSettings, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    found = read_page(REPO / page)
    assert any(isinstance(s, Command) and s.checked for s in found.steps), f"{page}: no example"
    pulse = initialised_pulse(settings)
    monkeypatch.chdir(tmp_path)
    (tmp_path / "examples").symlink_to(REPO / "examples")
    for step in found.steps:
        if not isinstance(step, Command):
            (tmp_path / step[0]).write_text(step[1], encoding="utf-8")
            continue
        assert step.args[0] == "pulse", f"{page}:{step.line}: only pulse commands run"
        result = pulse(*step.args[1:], USER=OPERATOR, LOGNAME=OPERATOR)
        printed = result.output.splitlines()
        if not step.checked:
            assert result.exit_code == 0, f"{page}:{step.line}: {result.output}"
            continue
        assert matches(step.expected, printed), (
            f"{page}:{step.line}: `{' '.join(step.args)}` printed (exit {result.exit_code}):\n"
            + "\n".join(printed)
            + "\n--- the page shows:\n"
            + "\n".join(step.expected)
        )


def test_every_block_that_shows_output_is_run_checked_or_says_why_not() -> None:
    """A block showing output (a `$ pulse ...` prompt with lines after it, or a fence that
    names no language or `json`) is an example the test runs, is read by the test that
    produces it (``<!-- output: KEY -->``, the test naming ``"PAGE#KEY"``), or carries
    ``<!-- example: not run: REASON -->``."""
    pages = [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]
    found = {p.relative_to(REPO).as_posix(): read_page(p) for p in pages}
    unmarked = [f"{name}:{line}" for name, page in found.items() for line in page.unmarked]
    assert unmarked == []
    for name, page in found.items():
        assert all(reason for _, reason in page.not_run), name
    tests = "\n".join(p.read_text("utf-8") for p in (REPO / "tests").rglob("*.py"))
    unread = [
        f"{name}#{key}"
        for name, page in found.items()
        for key in page.outputs
        if f'"{name}#{key}"' not in tests
    ]
    assert unread == [], "no test reads these blocks"
