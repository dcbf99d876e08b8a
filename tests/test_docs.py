"""The documentation keeps up with the code: docs/design/code.md names exactly the
packages, SQL files and test helpers of the tree; docs/json.md's keys are those the code
prints; the indexes of docs/ and docs/design/ list every page; links, their anchors and
the tests the docs cite resolve; no page repeats a run of words or glues a heading to the
text before it; and ``python -m bench --report`` writes the latest full run's table into
a README between its markers."""

from __future__ import annotations

import dataclasses
import itertools
import re
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from bench.__main__ import main as bench_main
from bench.report import BEGIN, END
from bench.results import Measure, ScenarioResult, append
from bench.runner import SCENARIOS
from bench.sizes import DEFAULT, QUICK, Sizes
from cluster.jobs.models import Job, Run
from tests.helpers.cli import GATED_SHOW_KEYS, JOB_KEYS, RUN_KEYS, RUN_SHOW_KEYS, SHOW_KEYS

REPO = Path(__file__).resolve().parents[1]
SQL_DIR = REPO / "cluster" / "store" / "sql"  # the named statements' files, listed in code.md
TREES = ("pulsecron", "ring", "cluster", "node")
DESIGN = REPO / "docs" / "design"
HELPERS = REPO / "tests" / "helpers"
REPEATED_WORDS = 12  # a run of this many words twice in one page is merge damage


def section(text: str, heading: str) -> str:
    """The body of the ``## heading`` section, up to the next ``## `` heading."""
    return text.split(f"\n## {heading}\n", 1)[1].split("\n## ", 1)[0]


def test_package_map_matches_the_tree() -> None:
    page = (REPO / "docs" / "design" / "code.md").read_text("utf-8")
    rows = re.findall(r"^\| `([\w.]+)` \|", section(page, "Package map"), re.MULTILINE)
    named = set(rows)
    assert len(rows) == len(named), "a package is named twice"
    packages = {
        ".".join(init.parent.relative_to(REPO).parts)
        for tree in TREES
        for init in (REPO / tree).rglob("__init__.py")
        if "__pycache__" not in init.parts
    }
    assert named - packages == set(), "named in the package map, but not a package"
    assert packages - named == set(), "a package the package map does not name"


def test_code_md_lists_the_sql_files() -> None:
    body = section((DESIGN / "code.md").read_text("utf-8"), "SQL and schema changes")
    assert f"`{SQL_DIR.relative_to(REPO)}/`" in body, "code.md names another SQL folder"
    listed = re.findall(r"^\| `([\w.-]+\.sql)` \|", body, re.MULTILINE)
    assert len(listed) == len(set(listed)), "a SQL file is listed twice"
    assert set(listed) == {path.name for path in SQL_DIR.glob("*.sql")}


def test_code_md_lists_the_test_helpers() -> None:
    body = section((DESIGN / "code.md").read_text("utf-8"), "Tests")
    listed = re.findall(r"^\| `(\w+)` \|", body, re.MULTILINE)
    assert len(listed) == len(set(listed)), "a helper module is listed twice"
    assert set(listed) == {path.stem for path in HELPERS.glob("*.py")} - {"__init__"}


def test_design_pages_referenced_from_code_exist() -> None:
    found: dict[str, list[str]] = {}
    for tree in (*TREES, "bench"):
        for path in sorted((REPO / tree).rglob("*")):
            if path.suffix not in (".py", ".sql") or "__pycache__" in path.parts:
                continue
            for page in re.findall(r"docs/design/[\w.-]+\.md", path.read_text("utf-8")):
                found.setdefault(page, []).append(str(path.relative_to(REPO)))
    missing = {page: where for page, where in found.items() if not (REPO / page).is_file()}
    assert missing == {}


# -- docs/json.md: the job and run keys are those the code prints ---------------------------


def part(page: str, heading: str) -> str:
    """The body under the heading line ``heading`` (``## Jobs``), up to the next heading of
    any level."""
    body = page.split(f"\n{heading}\n", 1)[1]
    return re.split(r"^#{1,6} ", body, maxsplit=1, flags=re.MULTILINE)[0]


def table_keys(body: str) -> list[str]:
    """The keys a table names in its first column (`` | `key` | ... ``)."""
    return re.findall(r"^\| `([\w.]+)` \|", body, re.MULTILINE)


def representative(cls: type[Any], **given: Any) -> Any:
    """An instance of the dataclass ``cls`` with every field set (none left at None), so
    that ``to_json`` prints every key it can; ``given`` sets fields by name."""
    moment = datetime(2026, 3, 1, 2, 0, tzinfo=UTC)
    by_type: dict[str, Any] = {
        "UUID": uuid.UUID(int=7),
        "str": "x",
        "int": 1,
        "float": 1.0,
        "bool": True,
        "datetime": moment,
        "dict": {"k": "v"},
        "tuple": ("a",),
    }
    values = {}
    for found in dataclasses.fields(cls):
        kind = str(found.type).split("|")[0].split("[")[0].strip()
        values[found.name] = given.get(found.name, by_type[kind])
    return cls(**values)


def documented(heading: str) -> set[str]:
    keys = table_keys(part(JSON_PAGE.read_text("utf-8"), heading))
    assert len(keys) == len(set(keys)), f"a key is listed twice under {heading}"
    return set(keys)


JSON_PAGE = REPO / "docs" / "json.md"


def test_the_job_keys_of_json_md_are_those_job_to_json_prints() -> None:
    """A job as ``pulse jobs list --json`` and the API print it (``Job.to_json``), built
    from its dataclass fields (no database), with and without expectations."""
    job = representative(
        Job,
        schedule="@every 30s",
        tz="UTC",
        handler="app.jobs:tick",
        dst_repeated="once",
        dst_skipped="shift",
        expect_max_s=600.0,
        asserts="rows > 0",
    )
    plain = dataclasses.replace(job, expect_max_s=None, asserts=None)
    assert set(job.to_json()) == set(plain.to_json()) == documented("## Jobs")
    assert documented("## Jobs") == JOB_KEYS  # the keys the CLI tests expect


def test_the_keys_jobs_show_adds_are_documented() -> None:
    """What ``pulse jobs show --json`` adds to a job (``JobStore.details``): the keys the
    CLI's integration tests find in its output, a job with upstreams' included."""
    added = documented("### What `pulse jobs show --json` adds")
    assert added == (SHOW_KEYS - JOB_KEYS) | GATED_SHOW_KEYS


def test_the_run_keys_of_json_md_are_those_run_to_json_prints() -> None:
    run = representative(Run)
    assert set(run.to_json()) == documented("## Runs") == RUN_KEYS
    assert documented("### What `pulse runs show --json` adds") == RUN_SHOW_KEYS


def markdown_files() -> list[Path]:
    return [REPO / "README.md", REPO / "bench" / "README.md", *sorted(REPO.glob("docs/**/*.md"))]


def outside_code(text: str) -> list[str]:
    """The lines of a markdown page outside its fenced code blocks."""
    lines, fenced = [], False
    for line in text.splitlines():
        if line.lstrip().startswith(("```", "~~~")):
            fenced = not fenced
        elif not fenced:
            lines.append(line)
    return lines


def anchors(page: Path) -> set[str]:
    """The anchors of a page's headings, as GitHub makes them (lowercase, punctuation but
    ``-`` and ``_`` dropped, spaces as ``-``, ``-1``, ``-2`` for a repeated heading)."""
    found: set[str] = set()
    seen: dict[str, int] = {}
    for line in outside_code(page.read_text("utf-8")):
        heading = re.match(r"#{1,6} (.+)", line)
        if heading:
            slug = re.sub(r"[^\w\- ]", "", heading.group(1).strip().lower()).replace(" ", "-")
            found.add(f"{slug}-{seen[slug]}" if slug in seen else slug)
            seen[slug] = seen.get(slug, 0) + 1
    return found


@pytest.mark.parametrize("doc", markdown_files(), ids=lambda p: str(p.relative_to(REPO)))
def test_relative_links_resolve(doc: Path) -> None:
    """Every relative link names a file that exists, and an anchor in a markdown page
    (``jobs.md#overlap``, ``#runs``) names one of its headings."""
    broken = []
    for target, anchor in re.findall(r"\]\(([^)#\s]*)(?:#([^)\s]*))?\)", doc.read_text("utf-8")):
        if re.match(r"[a-z]+:", target):
            continue
        path = doc.parent / target if target else doc
        if not path.exists():
            broken.append(target)
        elif anchor and path.suffix == ".md" and anchor not in anchors(path):
            broken.append(f"{target}#{anchor}")
    assert broken == []


@pytest.mark.parametrize("folder", [DESIGN, REPO / "docs"], ids=["docs/design", "docs"])
def test_the_index_links_every_page_of_its_folder(folder: Path) -> None:
    """The table of docs/design/README.md (the design index) and of docs/README.md links
    each page of its folder once (the links themselves are checked with every page's,
    above)."""
    index = (folder / "README.md").read_text("utf-8")
    linked = re.findall(r"^\| \[([\w.-]+\.md)\]\(\1\) \|", index, re.MULTILINE)
    assert len(linked) == len(set(linked)), "a page is listed twice"
    assert set(linked) == {p.name for p in folder.glob("*.md")} - {"README.md"}


@pytest.mark.parametrize("doc", markdown_files(), ids=lambda p: str(p.relative_to(REPO)))
def test_no_page_repeats_a_run_of_words(doc: Path) -> None:
    """Merges that keep both sides of a conflict leave a sentence, a row or a paragraph
    twice. Fails when a run of ``REPEATED_WORDS`` words occurs twice in one page: words
    are compared lowercased, without punctuation or markup, across line breaks. Fenced
    code blocks are left out (benchmark tables and command examples repeat by nature);
    tables are read like prose, so a row written twice is found too."""
    words = re.findall(r"\w+", "\n".join(outside_code(doc.read_text("utf-8"))).lower())
    first: dict[tuple[str, ...], int] = {}
    repeated = []
    for at in range(len(words) - REPEATED_WORDS + 1):
        run = tuple(words[at : at + REPEATED_WORDS])
        if run in first and (not repeated or at > repeated[-1][1] + REPEATED_WORDS):
            repeated.append((" ".join(run), at))
        first.setdefault(run, at)
    assert [text for text, _ in repeated] == []


@pytest.mark.parametrize("doc", markdown_files(), ids=lambda p: str(p.relative_to(REPO)))
def test_every_heading_starts_a_block(doc: Path) -> None:
    """A heading glued to the line before it is text merged in without its paragraph
    break (and some renderers do not take it for a heading)."""
    lines = outside_code(doc.read_text("utf-8"))
    glued = [
        line for before, line in itertools.pairwise(lines)
        if re.match(r"#{1,6} ", line) and before.strip()
    ]  # fmt: skip
    assert glued == []


def test_the_tests_the_docs_name_exist() -> None:
    """A page that cites a test file or a test function (``tests/e2e/test_gates.py``,
    ``test_a_stale_completion_releases_nothing``) cites one that exists. Code blocks are
    left out: their ``test_`` functions are examples of a user's tests."""
    modules = sorted((REPO / "tests").rglob("test_*.py"))
    defined = {path.stem for path in modules} | {
        name
        for path in modules
        for name in re.findall(r"^\s*(?:async )?def (test_\w+)", path.read_text("utf-8"), re.M)
    }
    missing = []
    for doc in markdown_files():
        text = "\n".join(outside_code(doc.read_text("utf-8")))
        missing += [f for f in re.findall(r"tests/[\w/]+\.py", text) if not (REPO / f).is_file()]
        missing += [n for n in re.findall(r"\b(test_\w+)\b", text) if n not in defined]
    assert missing == []


# -- python -m bench --report --------------------------------------------------------------


def measure(system: str, cpu_per_1k: float) -> Measure:
    return Measure(
        system=system,
        expected=1200,
        fires=1200,
        missing=0,
        duplicates=0,
        lag_p50_ms=20.0,
        lag_p99_ms=50.0,
        lag_max_ms=60.0,
        drain_s=0.1,
        node_cpu_per_1k_s=cpu_per_1k,
        pg_cpu_per_1k_s=0.05,
        peak_rss_mb=50.0,
    )


def record_run(out: Path, tag: str, sizes: Sizes, scenarios: list[str], rounds: int = 1) -> None:
    run = {
        "run": tag,
        "date": f"2026-12-0{len(tag)}T10:00:00+00:00",
        "command": f"python -m bench --out {tag}.jsonl",
        "machine": {"nproc": 2, "cpu": "Test CPU", "python": "3.11.7", "kernel": "6.1-test"},
        "commit": f"c0ffee{len(tag)}",
    }
    for round_no in range(1, rounds + 1):
        for name in scenarios:
            result = ScenarioResult(
                scenario=name,
                params=sizes.params("steady_jobs"),
                pulse=measure("pulse", 0.08 * round_no),
                baseline=measure("baseline", 0.04),
                round=round_no,
            )
            append(out, run, result)


README = f"# Benchmarks\n\nintro\n\n{BEGIN}\nold table\n{END}\n\n## After\n\nkept\n"


def test_report_writes_the_latest_full_run_between_the_markers(tmp_path: Path) -> None:
    results, readme = tmp_path / "results.jsonl", tmp_path / "README.md"
    readme.write_text(README, "utf-8")
    record_run(results, "f", DEFAULT, list(SCENARIOS))  # full: every scenario, default sizes
    record_run(results, "qq", QUICK, list(SCENARIOS))  # --quick sizes: not a full run
    record_run(results, "sss", DEFAULT, ["steady"])  # one scenario: not a full run
    assert bench_main(["--report", "--results", str(results), "--readme", str(readme)]) == 0
    text = readme.read_text("utf-8")
    assert text.startswith("# Benchmarks\n\nintro\n\n" + BEGIN + "\n")
    assert text.endswith(END + "\n\n## After\n\nkept\n")
    assert "old table" not in text
    block = text.split(BEGIN, 1)[1].split(END, 1)[0]
    assert "Run `f` of 2026-12-01 10:00 UTC, commit `c0ffee1`" in block
    assert "`python -m bench --out f.jsonl`" in block
    assert "2 CPUs (Test CPU), Python 3.11.7, kernel 6.1-test" in block
    for name in SCENARIOS:
        assert re.search(rf"^{name} +pulse +1200 +1200 +0 +0 ", block, re.MULTILINE), name
    assert "2.00x" in block  # node CPU per 1,000 fires: 0.08 against 0.04
    # Writing again replaces the block instead of adding one.
    assert bench_main(["--report", "--results", str(results), "--readme", str(readme)]) == 0
    assert readme.read_text("utf-8") == text


def test_report_of_several_rounds_shows_the_last_and_the_spread(tmp_path: Path) -> None:
    results, readme = tmp_path / "results.jsonl", tmp_path / "README.md"
    readme.write_text(README, "utf-8")
    record_run(results, "f", DEFAULT, list(SCENARIOS), rounds=3)
    assert bench_main(["--report", "--results", str(results), "--readme", str(readme)]) == 0
    block = readme.read_text("utf-8").split(BEGIN, 1)[1]
    assert "(round 3 of 3 above)" in block
    assert "6.00x" in block  # the last round's node CPU ratio: 0.24 against 0.04
    assert "node cpu/1k 4.00x (2.00x - 6.00x)" in block  # the median and range


def test_report_without_a_full_run_changes_nothing(tmp_path: Path) -> None:
    results, readme = tmp_path / "results.jsonl", tmp_path / "README.md"
    readme.write_text(README, "utf-8")
    record_run(results, "qq", QUICK, list(SCENARIOS))
    assert bench_main(["--report", "--results", str(results), "--readme", str(readme)]) == 1
    assert readme.read_text("utf-8") == README


def test_the_readme_sets_up_with_two_commands() -> None:
    """The README's first shell block is its set-up: one command that runs Pulse, one that
    runs the whole suite; every other way in is prose further down."""
    readme = (REPO / "README.md").read_text("utf-8")
    block = re.search(r"```sh\n(.*?)```", readme, re.S)
    assert block is not None
    commands = [line.split("#")[0].strip() for line in block.group(1).splitlines()]
    assert [c for c in commands if c] == ["bin/up", "bin/test"]
