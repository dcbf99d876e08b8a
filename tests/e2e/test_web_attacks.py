"""Attacks on a real ``pulse web`` and real nodes, each a named test that shows it refused:
nothing written, no secret in any response, row, log or output. The list, with the threat
model, is in docs/security.md; a new attack goes in both.

Sections: handlers written over the API; secrets and egress; console sessions and sign-in;
quotas and bodies; database roles and webhooks.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.helpers.web import Api, api_cluster

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def api(database_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Api]:
    with api_cluster(database_url, tmp_path_factory.mktemp("attacks")) as running:
        yield running


# --- Handlers written over the API -------------------------------------------------------


# --- Secrets and egress ------------------------------------------------------------------


# --- Console sessions and sign-in --------------------------------------------------------


# --- Quotas and bodies -------------------------------------------------------------------


# --- Database roles and webhooks ---------------------------------------------------------
