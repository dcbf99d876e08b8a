"""The previous release, read from the git history a clone has: its code, whose nodes the
rolling-upgrade test runs beside this tree's (``extract``), the statements those nodes send
(``statements``), and the migration files of every commit of main up to it
(``migration_sets``), whose schemas this tree must upgrade. ``needs_history`` skips a test
where there is no such history (an unpacked archive)."""

from __future__ import annotations

import io
import subprocess
import tarfile
from pathlib import Path

import pytest

from cluster.store.queries import _compact, _sections
from cluster.store.schema.migrate import Migration, of_file
from tests.helpers import REPO

# Release 0.2.0 as it landed on main. When a release is cut, the next one's tests take
# that release's commit.
PREVIOUS = "752fa64"
# Where main kept its migrations and its runtime SQL, over time.
MIGRATION_FOLDERS = (
    "cluster/migrations",
    "cluster/store/migrations",
    "cluster/store/schema/migrations",
)
SQL_FOLDER = "cluster/store/sql"


def git(*args: str, stdin: bytes | None = None) -> bytes:
    done = subprocess.run(
        ["git", "-C", str(REPO), *args], input=stdin, capture_output=True, check=True
    )
    return done.stdout


def _has_history() -> bool:
    try:
        git("cat-file", "-e", f"{PREVIOUS}^{{commit}}")
    except (OSError, subprocess.CalledProcessError):
        return False
    return True


HISTORY = _has_history()
needs_history = pytest.mark.skipif(not HISTORY, reason=f"needs the git history up to {PREVIOUS}")


def extract(dest: Path) -> Path:
    """The previous release's files, unpacked into ``dest``."""
    with tarfile.open(fileobj=io.BytesIO(git("archive", PREVIOUS))) as archive:
        archive.extractall(dest, filter="data")
    return dest


def statements() -> dict[str, str]:
    """The named statements of the previous release's ``sql/*.sql``, as its loader sent them."""
    names = git("ls-tree", "--name-only", PREVIOUS, f"{SQL_FOLDER}/").decode().split()
    found = {}
    for path in names:
        for name, body in _sections(git("show", f"{PREVIOUS}:{path}").decode("utf-8")):
            found[name] = _compact(body).rstrip(";")
    return found


def migration_sets() -> list[tuple[str, list[Migration]]]:
    """(commit, its migrations) for each different set of migration files that a commit of
    main up to the previous release had, oldest first."""
    commits = git("log", "--first-parent", "--format=%h", PREVIOUS, "--", *MIGRATION_FOLDERS)
    sets: dict[tuple[tuple[str, str], ...], str] = {}
    for commit in reversed(commits.decode().split()):
        listing = git("ls-tree", commit, *(f"{folder}/" for folder in MIGRATION_FOLDERS))
        files = []
        for line in listing.decode().splitlines():
            meta, path = line.split("\t")
            if path.endswith(".sql"):
                files.append((path.rsplit("/", 1)[1], meta.split()[2]))
        sets.setdefault(tuple(sorted(files)), commit)
    blobs = _blobs({blob for files in sets for _, blob in files})
    return [
        (commit, [of_file(name, blobs[blob]) for name, blob in files])
        for files, commit in sets.items()
    ]


def _blobs(ids: set[str]) -> dict[str, bytes]:
    """The contents of git blobs, read with one ``git cat-file --batch``."""
    order = sorted(ids)
    out = git("cat-file", "--batch", stdin="".join(f"{blob}\n" for blob in order).encode())
    found, at = {}, 0
    for blob in order:
        header_end = out.index(b"\n", at)
        size = int(out[at:header_end].split()[2])
        found[blob] = out[header_end + 1 : header_end + 1 + size]
        at = header_end + 1 + size + 1
    return found
