"""A shell command's metrics: lines ``name=value`` it appends to the file named by
``$PULSE_METRICS_FILE`` (docs/handlers.md), read when it exits and kept with the run like
``ctx.metric`` figures.

The file is in a directory of the node's own (mode 0700), named per run, and removed once
read; a command that writes none costs one failed ``open``. Lines that are not
``name=value`` with a metric name and a finite number are skipped; at most 32 names and
64 KiB are read (tests/unit/test_metrics.py).
"""

from __future__ import annotations

import atexit
import contextlib
import os
import shutil
import tempfile
import threading
import uuid

from cluster.errors import InvalidInput
from cluster.jobs.assertions import MAX_METRICS, metric_name, metric_value

MAX_FILE_BYTES = 64 * 1024
_lock = threading.Lock()
_folder: str | None = None


def new_path() -> str:
    """A path for one run's metrics file (not created: the command creates it if it
    reports anything)."""
    global _folder
    with _lock:
        if _folder is None:
            _folder = tempfile.mkdtemp(prefix="pulse-metrics-")
            atexit.register(shutil.rmtree, _folder, True)
        return os.path.join(_folder, uuid.uuid4().hex)


def parse(text: str) -> dict[str, float]:
    found: dict[str, float] = {}
    for line in text.splitlines():
        name, sep, value = line.strip().partition("=")
        if not sep:
            continue
        try:
            key = metric_name(name.strip())
            number = metric_value(float(value.strip()), key)
        except (InvalidInput, ValueError):
            continue
        if key in found or len(found) < MAX_METRICS:
            found[key] = number
    return found


def take(path: str) -> dict[str, float] | None:
    """The metrics written to ``path`` (None if none), and the file removed."""
    try:
        with open(path, "rb") as file:
            data = file.read(MAX_FILE_BYTES)
    except OSError:
        return None
    with contextlib.suppress(OSError):
        os.unlink(path)
    return parse(data.decode("utf-8", "replace")) or None
