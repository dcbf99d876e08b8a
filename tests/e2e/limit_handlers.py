"""Handlers of the named-limit end-to-end tests (imported by node processes).

``span`` is the chaos witness (a start line in ``$PULSE_WITNESS_FILE``, then it holds for
``payload["sleep_s"]``) that also writes when it ends, to ``$PULSE_WITNESS_FILE.ends``, with
one ``write`` on an ``O_APPEND`` descriptor like the witness: the test pairs each start with
its end and counts the runs in flight at once by the handlers' own clock. A run whose node
was killed has no end line: it ended with its node.
"""

from __future__ import annotations

from typing import Any

from cluster.chaos.witness import hold, witness_line


def span(ctx: Any) -> None:
    witness_line(ctx)
    hold(ctx)
    witness_line(ctx, ".ends")
