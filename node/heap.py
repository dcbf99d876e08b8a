"""The node process's heap and Python's cycle collector.

A started node holds some 95,000 objects that live as long as the process: its modules'
functions, classes and constants, and the libraries they import (psycopg, redis, croniter,
OpenTelemetry, Prometheus). A full (generation 2) collection walks every one of them,
and a tick of a few hundred fires allocates enough to set one off: on this project's
2-core benchmark machine each node's loop stopped for 70-160 ms, right when its runs were
due (docs/design/heap.md). Once the node has started, ``settle`` collects what start-up
left behind and moves every surviving object to the permanent generation
(``gc.freeze``), so later collections walk only what the node allocated since.

Only a process that owns its heap settles it: ``pulse node``. A node hosted on an
application's loop leaves the application's heap alone, since a frozen object that later
becomes garbage in a cycle is never collected.
"""

from __future__ import annotations

import gc


def settle() -> int:
    """Collect, then freeze every object that survived; return how many are frozen."""
    gc.collect()
    gc.freeze()
    return gc.get_freeze_count()
