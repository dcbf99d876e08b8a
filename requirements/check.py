"""bin/setup's check of an installed lock: exit with a message when pyproject.toml asks for
a package or a version that the lock does not hold (bin/lock was not run after an edit);
otherwise print the installed distributions the lock does not list, for bin/setup to remove.

Run with the venv's Python after the lock and Pulse are installed: ``check.py LOCKFILE``."""

from __future__ import annotations

import re
import sys
from importlib.metadata import distributions, requires, version
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

PROJECT = "pulsecron"


def main(lockfile: str) -> None:
    text = Path(lockfile).read_text("utf-8")
    pins = re.findall(r"^([A-Za-z0-9][\w.-]*)==", text, re.MULTILINE)
    locked = {canonicalize_name(name) for name in pins}
    # The dev extra, with the extras of Pulse it names (pulsecron[web,otel]).
    seen: set[str] = set()
    extras, unmet = ["dev"], []
    while extras:
        extra = extras.pop()
        seen.add(extra)
        for line in requires(PROJECT) or []:
            req = Requirement(line)
            if req.marker is not None and not req.marker.evaluate({"extra": extra}):
                continue
            if canonicalize_name(req.name) == PROJECT:
                extras += [e for e in req.extras if e not in seen]
            elif canonicalize_name(req.name) not in locked or not req.specifier.contains(
                version(req.name), prereleases=True
            ):
                unmet.append(f"{req.name}{req.specifier}")
    if unmet:
        sys.exit(f"setup: {lockfile} does not hold {', '.join(sorted(set(unmet)))}: run bin/lock")
    installed = {canonicalize_name(d.metadata["Name"]) for d in distributions()}
    print(" ".join(sorted(installed - locked - {PROJECT})))


if __name__ == "__main__":
    main(sys.argv[1])
