"""The distribution as users get it: ``python -m build`` makes an sdist and a wheel of this
tree, the wheel installs into a fresh venv outside the repository, and there ``pulse``
(``--version``, ``schedule``, ``init``, ``node``) and ``import pulsecron`` work, with the
SQL and the migrations read from inside the installed package."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import tarfile
import tomllib
import zipfile
from pathlib import Path

import pytest

from cluster.health.status import collect
from cluster.local.processes import Command, pulse_env
from cluster.settings import ClusterSettings
from tests.helpers import REPO
from tests.helpers.waiting import until

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.timeout(300)]

VERSION = tomllib.loads((REPO / "pyproject.toml").read_text("utf-8"))["project"]["version"]
MIGRATIONS = sorted(p.name for p in (REPO / "cluster/store/schema/migrations").glob("*.sql"))
STATEMENTS = sorted(p.name for p in (REPO / "cluster/store/sql").glob("*.sql"))


def run(argv: list[str], cwd: Path, env: dict[str, str] | None = None) -> str:
    done = subprocess.run(
        argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=240, check=False
    )
    assert done.returncode == 0, f"{argv}: {done.stdout}\n{done.stderr}"
    return done.stdout


def build(tmp_path: Path) -> tuple[Path, Path]:
    """Build this working tree (its tracked and new files, nothing ignored) elsewhere."""
    listed = run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], REPO)
    src = tmp_path / "src"
    for name in filter(None, listed.split("\0")):
        if (REPO / name).is_file():
            (src / name).parent.mkdir(parents=True, exist_ok=True)
            (src / name).write_bytes((REPO / name).read_bytes())
    dist = tmp_path / "dist"
    run([sys.executable, "-m", "build", "--outdir", str(dist), str(src)], tmp_path)
    (wheel,) = dist.glob("pulsecron-*.whl")
    (sdist,) = dist.glob("pulsecron-*.tar.gz")
    return wheel, sdist


def test_the_wheel_installs_and_runs_outside_the_repository(
    settings: ClusterSettings, tmp_path: Path
) -> None:
    wheel, sdist = build(tmp_path)
    assert wheel.name == f"pulsecron-{VERSION}-py3-none-any.whl"
    files = set(zipfile.ZipFile(wheel).namelist())
    inside = {"cluster/store/schema/schema.sql", "pulsecron/__init__.py", "pulsecron/py.typed"}
    inside |= {f"cluster/store/sql/{name}" for name in STATEMENTS}
    inside |= {f"cluster/store/schema/migrations/{name}" for name in MIGRATIONS}
    assert inside <= files, inside - files
    assert not any(f.startswith(("tests/", "examples/", "bench/")) for f in files)
    with tarfile.open(sdist) as archive:
        names = {n.split("/", 1)[1] for n in archive.getnames() if "/" in n}
    assert {"cluster/store/sql/claim.sql", "pyproject.toml"} <= names

    venv, elsewhere = tmp_path / "venv", tmp_path / "elsewhere"
    elsewhere.mkdir()
    run([sys.executable, "-m", "venv", str(venv)], tmp_path)
    run([str(venv / "bin/python"), "-m", "pip", "install", "-q", str(wheel)], tmp_path)
    pulse = str(venv / "bin/pulse")
    env = pulse_env(settings)
    env.pop("PYTHONPATH", None)
    env["PATH"] = f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}"

    assert run([pulse, "--version"], elsewhere, env).strip() == f"pulse, version {VERSION}"
    slots = run(
        [pulse, "schedule", "*/5 * * * *", "--count", "2", "--after", "2026-01-01T00:00:00+00:00"],
        elsewhere,
        env,
    )
    assert "2026-01-01T00:05:00+00:00" in slots and "2026-01-01T00:10:00+00:00" in slots, slots
    code = (
        "import pulsecron, cluster; from cluster.store.queries import query; "
        "assert query('db_now'); print(pulsecron.__version__, cluster.__file__)"
    )
    version, where = run([str(venv / "bin/python"), "-c", code], elsewhere, env).split()
    assert version == VERSION and Path(where).is_relative_to(venv), where
    assert "(applied: 001_init, " in run([pulse, "init", "--shards", "16"], elsewhere, env)

    argv = (pulse, "node", "--node-id", "wheel-1", "--drain-timeout", "2s")
    node = Command(argv, env, elsewhere).start("wheel-1", tmp_path / "node.log")
    try:

        def joined() -> bool:
            if not node.running:
                raise AssertionError(node.tail())
            members = asyncio.run(collect(settings)).members
            return any(m.node_id == "wheel-1" and m.has_session for m in members)

        until(joined, "the installed node to join", 60)
        assert node.stop(30) == 0, node.tail()
    finally:
        node.stop(5)
