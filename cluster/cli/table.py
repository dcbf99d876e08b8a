"""Plain-text tables for the CLI's listings: columns padded to their widest cell."""

from __future__ import annotations

import click


def table(rows: list[list[str]]) -> None:
    """Print ``rows`` (the first is the header) with each column as wide as its widest cell."""
    if not rows:
        return
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    for row in rows:
        click.echo("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip())
