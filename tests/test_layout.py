"""`cluster`, `node` and `ring` are generic names (PyPI has distributions called all three):
they must resolve to this repository, both in the test process and in the installed venv."""

from __future__ import annotations

import importlib
import importlib.metadata
import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PACKAGES = ("cluster", "node", "ring", "pulsecron")


@pytest.mark.parametrize("name", PACKAGES)
def test_package_imports_from_this_repo(name: str) -> None:
    module = importlib.import_module(name)
    assert module.__file__ is not None
    assert Path(module.__file__).resolve() == REPO / name / "__init__.py"


def test_installed_venv_resolves_to_this_repo_from_elsewhere(tmp_path: Path) -> None:
    # From another directory the repo root is not on sys.path by accident: only the
    # installed distribution can make these imports work.
    code = (
        "import json, cluster, node, ring, pulsecron; "
        "print(json.dumps([m.__file__ for m in (cluster, node, ring, pulsecron)]))"
    )
    out = subprocess.run(
        [sys.executable, "-I", "-c", code], cwd=tmp_path, capture_output=True, text=True, check=True
    )
    files = [Path(f).resolve() for f in json.loads(out.stdout)]
    assert files == [REPO / name / "__init__.py" for name in PACKAGES]


def test_no_other_distribution_provides_the_packages() -> None:
    owners = importlib.metadata.packages_distributions()
    for name in PACKAGES:
        assert set(owners.get(name, [])) == {"pulsecron"}, (name, owners.get(name))


# What may stay at the root of `cluster` and `node` (docs/design/code.md): everything else
# lives in a subpackage named after its responsibility.
ROOT_MODULES = {
    "cluster": {"__init__", "errors", "logs", "members", "settings", "urls"},
    "cluster/store": {
        *("__init__", "config", "connect", "deadline", "notify", "queries", "side", "tally"),
    },
    "node": {
        "__init__",
        "__main__",
        "cli",
        "heap",
        "hosted",
        "metrics",
        "parts",
        "runtime",
        "service",
        "shutdown",
        "state",
        "stats",
    },
}


@pytest.mark.parametrize("package", sorted(ROOT_MODULES))
def test_only_shared_and_lifecycle_modules_stay_at_the_root(package: str) -> None:
    found = {p.stem for p in (REPO / package).glob("*.py")}
    assert found == ROOT_MODULES[package]


# A flat folder grows back: each of these keeps its root to a few modules and puts the rest
# in rooms named after what they own (docs/design/code.md).
ROOT_CAPS = {"cluster/store": 8, "cluster/cli": 20, "cluster/chaos": 12}


@pytest.mark.parametrize("package", sorted(ROOT_CAPS))
def test_a_package_root_stays_small(package: str) -> None:
    found = sorted(p.stem for p in (REPO / package).glob("*.py"))
    assert len(found) <= ROOT_CAPS[package], found


def subpackages() -> list[Path]:
    return sorted(
        init
        for tree in PACKAGES
        for init in (REPO / tree).rglob("__init__.py")
        if "__pycache__" not in init.parts
    )


@pytest.mark.parametrize("init", subpackages(), ids=lambda p: str(p.parent.relative_to(REPO)))
def test_every_package_says_what_it_owns(init: Path) -> None:
    text = init.read_text("utf-8").lstrip()
    assert text.startswith('"""'), "a package's __init__.py starts with a docstring"
