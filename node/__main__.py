"""``python -m node ...`` is ``pulse ...`` (used to start node processes)."""

from node.cli import main

main()
