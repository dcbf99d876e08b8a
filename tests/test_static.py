"""Static checks run as part of the suite: ruff (lint and format), mypy strict on the three
packages, and the import layers (node -> cluster -> ring; only cluster touches drivers)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
TREES = ["cluster", "node", "ring", "pulsecron", "tests", "bench", "examples", "requirements"]


def run(*cmd: str) -> subprocess.CompletedProcess[str]:
    present = [t for t in TREES if (ROOT / t).exists()]
    argv = [str(BIN / cmd[0]), *cmd[1:], *(present if cmd[0] == "ruff" else [])]
    return subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=600, check=False)


@pytest.mark.parametrize(
    "cmd",
    [("ruff", "check"), ("ruff", "format", "--check"), ("mypy",), ("lint-imports",)],
    ids=["ruff-check", "ruff-format", "mypy", "import-layers"],
)
@pytest.mark.timeout(900)
def test_static_check_passes(cmd: tuple[str, ...]) -> None:
    result = run(*cmd)
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
