"""The migration files: named so that parallel branches never collide, in one order, and
frozen once released. ``cluster/store/schema/released.txt`` lists the sha256 of every file a
release shipped (``bin/release`` writes it when a release is cut); a listed file that
changes, moves or goes fails here, before an operator's `pulse init` refuses it
(docs/design/schema.md)."""

from __future__ import annotations

import re
import tomllib

from cluster.store.schema.migrate import Migration, available
from tests.helpers import REPO

MANIFEST = REPO / "cluster" / "store" / "schema" / "released.txt"
# A path in a comment goes stale when files move, and a released file cannot follow.
PATH = re.compile(r"[\w.-]+/[\w./-]*[\w-]|\b[\w-]+\.(?:py|sql|md|toml|txt)\b")


def released() -> list[tuple[str, str, str]]:
    """(release, file, sha256) of each line of the manifest."""
    lines = MANIFEST.read_text("utf-8").splitlines()
    rows = [tuple(line.split()) for line in lines if line and not line.startswith("#")]
    assert all(len(row) == 3 for row in rows), "each line: release file sha256"
    return [(r[0], r[1], r[2]) for r in rows]


def release_key(release: str) -> tuple[int, ...]:
    return tuple(int(part) for part in release.split("."))


def label(migration: Migration) -> str | None:
    """The release a migration is named for; None for a numbered one."""
    return None if migration.number is not None else migration.name.split("_", 1)[0]


def test_released_migrations_are_as_released() -> None:
    files = {m.filename: m for m in available()}
    for release, filename, checksum in released():
        assert filename in files, f"{filename}, released in {release}, is gone or renamed"
        assert files[filename].checksum == checksum, (
            f"{filename} was edited after release {release}: restore it and put the change "
            "in a new migration"
        )


def test_releases_are_listed_in_the_order_their_migrations_apply() -> None:
    order = {m.filename: m.order for m in available()}
    rows = released()
    assert len({filename for _, filename, _ in rows}) == len(rows), "a file listed twice"
    keys = [(release_key(release), order[filename]) for release, filename, _ in rows]
    assert sorted(keys) == sorted(keys, key=lambda key: key[1]), "a release before an earlier one"
    for release, filename, _ in rows:
        named = label(next(m for m in available() if m.filename == filename))
        assert named is None or release_key(named) <= release_key(release), filename


def test_unreleased_migrations_apply_after_every_released_one() -> None:
    """So a fresh init and the upgrade of a released schema apply them in the same order."""
    listed = {filename for _, filename, _ in released()}
    newest = max(release_key(release) for release, _, _ in released())
    last = max(m.order for m in available() if m.filename in listed)
    for migration in available():
        if migration.filename not in listed:
            assert migration.order > last, f"{migration.filename} applies before a released one"
            named = label(migration)
            if named is not None:  # a numbered one is one of 001 to 029, tested below
                assert release_key(named) > newest, f"{migration.filename}: {named} is out"


def test_the_numbered_migrations_are_001_to_029() -> None:
    """Numbers ended with release 0.2.0: two branches would each take the next one."""
    assert [m.number for m in available() if m.number is not None] == list(range(1, 30))


def test_the_newest_release_is_the_package_version() -> None:
    project = tomllib.loads((REPO / "pyproject.toml").read_text("utf-8"))["project"]
    newest = max((release for release, _, _ in released()), key=release_key)
    assert project["version"] == newest, "bin/release sets both"


def test_migrations_since_the_numbered_ones_name_no_file_in_their_comments() -> None:
    for migration in available():
        if migration.number is None:
            comments = [line for line in migration.text.splitlines() if "--" in line]
            found = [m for line in comments for m in PATH.findall(line.split("--", 1)[1])]
            assert found == [], f"{migration.filename} names {found}: say what, not where"


def test_the_path_pattern_finds_paths() -> None:
    found = PATH.findall("see cluster/store/migrate.py, docs/design/schema.md and queries.sql")
    assert found == ["cluster/store/migrate.py", "docs/design/schema.md", "queries.sql"]
    assert PATH.findall("migrations 005 and 007, 0.2.0_pre_x, e367d4e, `pulse init`") == []
