"""``pulse chaos``: a fault-injection harness that checks Pulse's guarantees end to end.

It owns everything around real node processes and never imports ``node``: throwaway
servers and the per-node TCP proxies that cut or stall a node's traffic (``servers/``),
the node processes (``fleet``), the workload and its handlers (``workload``, ``witness``,
``ledger``, ``poison``), a seeded fault plan (``plan``) and its injection (``inject``), lock
sampling and result collection (``probes``), and the pure checks that turn what happened
into a verdict (``verdict/``, no I/O).
``harness`` wires one run together; ``cluster/cli/chaos.py`` is its command. Node
processes are started by ``cluster.local.processes``, as ``pulse up`` starts them.
"""
