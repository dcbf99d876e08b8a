"""The local cluster launcher behind ``pulse up``: N node processes in the foreground.

Each node is ``python -m node node --node-id <zone>-<i> --zone <zone>`` (and ``pulse web``,
when asked, is one more process supervised the same way), started by
``cluster.local.processes`` in its own process group (so a terminal's Ctrl-C reaches only
the launcher, which then signals each node exactly once), with the launcher's ``PULSE_*``
environment. Their output lines are
prefixed with the node's name, in its own colour on a terminal. Ctrl-C or SIGTERM sends
SIGTERM to every node and waits for them to drain; a second Ctrl-C kills them. A node
that dies on its own is reported and, unless it refused its configuration, restarted with
backoff. On Linux the nodes also get SIGTERM if the launcher itself dies.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TextIO

from cluster.local.processes import Command, node_argv, signal_group

EXIT_CONFIG = 2  # what a node returns when it refuses its settings: restarting is pointless
RESTART_MIN_S = 1.0
RESTART_MAX_S = 30.0
STABLE_AFTER_S = 60.0  # a node that ran this long restarts with the minimum backoff again
LINE_LIMIT = 1 << 20
# Nodes start one after another: the log reads as nodes joining one by one, and their
# start-up checks on the lock session do not run at the same instant.
STAGGER_S = 0.5
_COLOURS = (36, 35, 33, 32, 34, 96, 95, 93, 92, 94)


@dataclass(frozen=True)
class NodeSpec:
    """One process to supervise: a node, or (``zone`` None) the ``pulse web`` beside them."""

    name: str
    zone: str | None
    argv: tuple[str, ...]
    env: Mapping[str, str] = field(default_factory=dict)  # over the launcher's


def web_spec(bind: str) -> NodeSpec:
    """``pulse web`` on ``bind``, supervised like a node."""
    return NodeSpec("web", None, (sys.executable, "-m", "node", "web", "--bind", bind))


def plan_nodes(
    count: int,
    zones: Sequence[str],
    extra_args: Sequence[str] = (),
    metrics_port_base: int | None = None,
) -> list[NodeSpec]:
    """Spread ``count`` nodes round-robin over ``zones``: a-1, b-1, c-1, a-2, ..."""
    specs = []
    for i in range(count):
        zone = zones[i % len(zones)]
        name = f"{zone}-{i // len(zones) + 1}"
        options = list(extra_args)
        if metrics_port_base is not None:
            options[:0] = ["--metrics-port", str(metrics_port_base + i)]
        specs.append(NodeSpec(name, zone, node_argv(name, zone, *options)))
    return specs


def use_colour(stream: TextIO) -> bool:
    if os.environ.get("NO_COLOR"):
        return False
    if os.environ.get("FORCE_COLOR"):
        return True
    return stream.isatty()


@dataclass
class _Node:
    spec: NodeSpec
    colour: int
    proc: asyncio.subprocess.Process | None = None
    started: float = 0.0
    exit_code: int | None = None


@dataclass
class Launcher:
    specs: Sequence[NodeSpec]
    env: Mapping[str, str]
    out: TextIO = field(default_factory=lambda: sys.stdout)
    colour: bool = False
    prefix: bool = True
    restart: bool = True
    stagger_s: float = STAGGER_S
    _nodes: list[_Node] = field(init=False, default_factory=list)
    _stopping: bool = field(init=False, default=False)
    _killed: bool = field(init=False, default=False)
    _stop: asyncio.Event | None = field(init=False, default=None)

    def __post_init__(self) -> None:
        self._nodes = [_Node(s, _COLOURS[i % len(_COLOURS)]) for i, s in enumerate(self.specs)]
        self._width = max((len(s.name) for s in self.specs), default=4)

    # -- output -----------------------------------------------------------------------

    def _paint(self, text: str, colour: int, bold: bool = False) -> str:
        if not self.colour:
            return text
        return f"\x1b[{'1;' if bold else ''}{colour}m{text}\x1b[0m"

    def _emit(self, line: str) -> None:
        try:
            self.out.write(line + "\n")
            self.out.flush()
        except (BrokenPipeError, ValueError):
            pass  # output closed (e.g. piped into `head`): keep the cluster running

    def say(self, message: str) -> None:
        """A line from the launcher itself."""
        self._emit(f"{self._paint('pulse up', 39, bold=True)}: {message}")

    def _node_line(self, node: _Node, text: str) -> None:
        if not self.prefix:
            self._emit(text)
            return
        label = self._paint(node.spec.name.ljust(self._width), node.colour, bold=True)
        self._emit(f"{label} | {text}")

    # -- processes --------------------------------------------------------------------

    async def _start(self, node: _Node) -> asyncio.subprocess.Process:
        env = {**self.env, **node.spec.env}
        proc = await Command(node.spec.argv, env).start_async(limit=LINE_LIMIT)
        node.proc = proc
        node.started = time.monotonic()
        where = f" in zone {node.spec.zone}" if node.spec.zone is not None else ""
        self.say(f"started {node.spec.name}{where} (pid {proc.pid})")
        return proc

    async def _pump(self, node: _Node, proc: asyncio.subprocess.Process) -> None:
        assert proc.stdout is not None
        while True:
            try:
                raw = await proc.stdout.readline()
            except ValueError:  # a line longer than LINE_LIMIT: pass it on in pieces
                raw = await proc.stdout.read(LINE_LIMIT)
            if not raw:
                return
            self._node_line(node, raw.decode("utf-8", "replace").rstrip("\r\n"))

    async def _supervise(self, node: _Node, delay_s: float) -> None:
        assert self._stop is not None
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._stop.wait(), delay_s)
        if self._stopping:
            return
        backoff = RESTART_MIN_S
        while True:
            proc = await self._start(node)
            if self._stopping:  # the stop signal went out while this node was starting
                signal_group(proc, signal.SIGKILL if self._killed else signal.SIGTERM)
            await self._pump(node, proc)
            code = await proc.wait()
            node.exit_code = code
            if self._stopping:
                if code == -signal.SIGTERM:
                    # Our SIGTERM arrived before the node set up its handlers: it had not
                    # started serving, so there was nothing to drain.
                    code = node.exit_code = 0
                how = "stopped" if code == 0 else f"exited with {_describe(code)}"
                self.say(f"{node.spec.name} {how}")
                return
            self.say(f"{node.spec.name} died unexpectedly ({_describe(code)})")
            if not self.restart or code == EXIT_CONFIG:
                why = "it refused its configuration" if code == EXIT_CONFIG else "--no-restart"
                self.say(f"not restarting {node.spec.name} ({why})")
                return
            if time.monotonic() - node.started >= STABLE_AFTER_S:
                backoff = RESTART_MIN_S
            self.say(f"restarting {node.spec.name} in {backoff:g}s")
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stop.wait(), backoff)
            if self._stopping:
                return
            backoff = min(RESTART_MAX_S, backoff * 2)

    def _signal_all(self, sig: signal.Signals) -> None:
        for node in self._nodes:
            if node.proc is not None:
                signal_group(node.proc, sig)

    def request_stop(self) -> None:
        """First call: drain every node (SIGTERM). Second call: kill them all."""
        if not self._stopping:
            self._stopping = True
            assert self._stop is not None
            self._stop.set()
            live = [n for n in self._nodes if n.proc and n.proc.returncode is None]
            nodes = sum(1 for n in live if n.spec.zone is not None)
            web = " and pulse web" if len(live) > nodes else ""
            self.say(
                f"stopping {plural(nodes, 'node')}{web}: waiting for them to drain "
                "(Ctrl-C again to kill)"
            )
            self._signal_all(signal.SIGTERM)
        elif not self._killed:
            self._killed = True
            self.say("killing every node now")
            self._signal_all(signal.SIGKILL)

    async def run(self) -> int:
        """Run until stopped (0 when every node drained cleanly) or every node is gone (1)."""
        self._stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, self.request_stop)
        try:
            await asyncio.gather(
                *(self._supervise(n, i * self.stagger_s) for i, n in enumerate(self._nodes))
            )
        finally:
            for sig in (signal.SIGINT, signal.SIGTERM):
                loop.remove_signal_handler(sig)
            self._signal_all(signal.SIGKILL)  # only reached with live nodes on a crash
        if not self._stopping:
            self.say("every node has stopped; exiting")
            return 1
        if self._killed:
            return 130
        failed = [n.spec.name for n in self._nodes if n.exit_code not in (0, None)]
        if failed:
            self.say(f"nodes that did not stop cleanly: {', '.join(failed)}")
            return 1
        self.say("all nodes stopped")
        return 0


def plural(count: int, noun: str) -> str:
    return f"{count} {noun}{'' if count == 1 else 's'}"


def _describe(code: int) -> str:
    if code < 0:
        try:
            return f"signal {signal.Signals(-code).name}"
        except ValueError:
            return f"signal {-code}"
    return f"exit code {code}"
