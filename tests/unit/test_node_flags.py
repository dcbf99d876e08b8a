"""`pulse node` flags that only choose behaviour reach the node's settings: fair fan-out
is on unless ``--no-fairness`` or ``PULSE_FAIRNESS=off`` turns it off."""

from __future__ import annotations

from typing import Any

import pytest

import node.cli
from cluster.settings import NodeSettings
from tests.helpers.cli import invoke


@pytest.mark.parametrize(
    ("args", "env", "fair"),
    [
        ([], {}, True),
        (["--no-fairness"], {}, False),
        ([], {"PULSE_FAIRNESS": "off"}, False),
        (["--fairness"], {"PULSE_FAIRNESS": "off"}, True),
    ],
)
def test_fairness_is_on_unless_turned_off(
    monkeypatch: pytest.MonkeyPatch, args: list[str], env: dict[str, str], fair: bool
) -> None:
    seen: list[NodeSettings] = []

    class Node:
        def __init__(self, cluster: Any, settings: NodeSettings, *synced: Any) -> None:
            seen.append(settings)

        async def run(self) -> int:
            return 0

    monkeypatch.setattr(node.cli, "Node", Node)
    result = invoke(env, "node", "--node-id", "n1", *args)
    assert result.exit_code == 0, result.output
    assert [s.fairness for s in seen] == [fair]
