"""Fixtures of the end-to-end tests: a fleet of real node processes, always cleaned up."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from cluster.settings import ClusterSettings
from tests.helpers.fleet import Fleet


@pytest.fixture
def fleet(settings: ClusterSettings, tmp_path: Path) -> Iterator[Fleet]:
    nodes = Fleet(settings, tmp_path)
    try:
        yield nodes
    finally:
        nodes.close()
