"""Fixtures of the unit tests."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from tests.helpers.claimed import Executors


@pytest.fixture
async def executors() -> AsyncIterator[Executors]:
    """``executors(concurrency)``: an executor and the outcomes it reports, shut down after
    the test (in its event loop), whatever happened."""
    made = Executors()
    yield made
    await made.close()
