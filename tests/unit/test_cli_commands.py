"""The ``pulse`` root group's table of lazily loaded commands (``cluster/cli/app.py``): it
names exactly the commands the group lists besides ``init`` and ``node``, each entry loads
a click command of that name, no command defined in ``cluster.cli`` is left out of the
tree, and importing the group (or the ``pulse`` entry point) loads none of the heavy
modules only some commands need, the chaos harness and the mailer."""

from __future__ import annotations

import importlib
import json
import pkgutil
import subprocess
import sys

import click
from click.testing import CliRunner

import cluster.cli
from cluster.cli.app import COMMANDS
from node.cli import cli
from tests.helpers import REPO

EAGER = {"init", "node"}  # defined with the group (app) and by the entry point (node.cli)
HEAVY = ("cluster.chaos.harness", "cluster.alerts.mailer")


def context() -> click.Context:
    return click.Context(cli, info_name="pulse")


def test_the_table_names_exactly_the_commands_the_group_lists() -> None:
    listed = cli.list_commands(context())
    assert sorted(COMMANDS) == [name for name in listed if name not in EAGER]
    assert set(listed) >= EAGER and EAGER.isdisjoint(COMMANDS)
    assert listed == sorted(listed)  # the help lists them in order, as before


def test_each_entry_loads_a_click_command_of_its_name() -> None:
    for name, target in COMMANDS.items():
        command = cli.get_command(context(), name)
        assert isinstance(command, click.Command), target
        assert command.name == name, f"{target} is named {command.name!r}, listed as {name!r}"
        assert command.get_short_help_str(), f"{target} has no help"


def reachable(group: click.Group) -> set[int]:
    """The ids of the commands ``pulse`` reaches from ``group``, every level down."""
    found: set[int] = set()
    for name in group.list_commands(context()):
        command = group.get_command(context(), name)
        assert command is not None, name
        found.add(id(command))
        if isinstance(command, click.Group):
            found |= reachable(command)
    return found


def test_every_command_of_cluster_cli_is_reachable() -> None:
    """A command defined in a module of ``cluster.cli`` and attached nowhere (renamed in its
    module, left out of the table) would be gone from ``pulse`` without an error."""
    every = reachable(cli) | {id(cli)}
    modules = [
        importlib.import_module(info.name)
        for info in pkgutil.walk_packages(cluster.cli.__path__, "cluster.cli.")
    ]
    left_out = [
        f"{module.__name__}.{attribute}"
        for module in modules
        for attribute, value in vars(module).items()
        if isinstance(value, click.Command) and id(value) not in every
    ]
    assert left_out == []


def test_an_unknown_command_is_matched_against_the_commands_not_yet_loaded() -> None:
    result = CliRunner().invoke(cli, ["chaoss"], prog_name="pulse")
    assert result.exit_code == 2
    assert "No such command 'chaoss'. Did you mean 'chaos'?" in result.stderr


def test_importing_the_group_loads_neither_the_chaos_harness_nor_the_mailer() -> None:
    """In a process of its own (this one has loaded every command): the root group, then
    the ``pulse`` entry point and the names of its commands, then two other commands, then
    the commands that do need them."""
    code = (
        "import sys, json, click\n"
        f"heavy = {HEAVY!r}\n"
        "loaded = lambda: [m for m in heavy if m in sys.modules]\n"
        "import cluster.cli.app\n"
        "seen = [loaded()]\n"
        "from node.cli import cli\n"
        "ctx = click.Context(cli)\n"
        "names = cli.list_commands(ctx), sorted(cli.commands), 'chaos' in cli.commands\n"
        "seen.append(loaded())\n"
        "cli.get_command(ctx, 'jobs'), cli.get_command(ctx, 'runs')\n"
        "seen.append(loaded())\n"
        "cli.get_command(ctx, 'chaos'), cli.get_command(ctx, 'alerts')\n"
        "seen.append(loaded())\n"
        "print(json.dumps(seen))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True
    )
    assert json.loads(out.stdout) == [[], [], [], list(HEAVY)]
