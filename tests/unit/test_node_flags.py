"""`pulse node` flags that only choose behaviour reach the node's settings: fair fan-out
is on unless ``--no-fairness`` or ``PULSE_FAIRNESS=off`` turns it off."""

from __future__ import annotations

import logging
from typing import Any

import pytest
from click.testing import CliRunner

import node.cli
from cluster.settings import NodeSettings


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
        def __init__(self, cluster: Any, settings: NodeSettings, specs: Any) -> None:
            seen.append(settings)

        async def run(self) -> int:
            return 0

    monkeypatch.setattr(node.cli, "Node", Node)
    root = logging.getLogger()  # the command configures it: give it back as it was
    monkeypatch.setattr(root, "handlers", root.handlers[:])
    monkeypatch.setattr(root, "level", root.level)
    result = CliRunner().invoke(
        node.cli.cli, ["node", "--node-id", "n1", *args], env=env, prog_name="pulse"
    )
    assert result.exit_code == 0, result.output
    assert [s.fairness for s in seen] == [fair]
