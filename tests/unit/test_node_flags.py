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


def test_metrics_listen_on_loopback_unless_told_and_a_bad_address_is_one_line(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    seen: list[NodeSettings] = []

    class Node:
        def __init__(self, cluster: Any, settings: NodeSettings, *synced: Any) -> None:
            seen.append(settings)

        async def run(self) -> int:
            return 0

    monkeypatch.setattr(node.cli, "Node", Node)
    assert invoke({}, "node", "--node-id", "n1").exit_code == 0
    assert invoke({"PULSE_METRICS_BIND": "0.0.0.0"}, "node", "--node-id", "n1").exit_code == 0
    assert [s.metrics_bind for s in seen] == ["127.0.0.1", "0.0.0.0"]
    bad = invoke({}, "node", "--node-id", "n1", "--metrics-bind", "everywhere")
    assert bad.exit_code == 2 and len(bad.stderr.strip().splitlines()) == 1
    assert "metrics-bind" in bad.stderr
