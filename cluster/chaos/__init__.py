"""``pulse chaos``: a fault-injection harness that checks Pulse's guarantees end to end.

It owns everything around real node processes and never imports ``node``: throwaway
Postgres and Redis servers (``servers``), per-node TCP proxies that can cut or stall a
node's traffic (``proxy``), the node processes (``fleet``), the workload and its handlers
(``workload``, ``witness``, ``ledger``), a seeded fault plan (``plan``) and its injection
(``inject``), lock sampling and result collection (``probes``), and the checks that turn
what happened into a verdict (``observations``, ``safety``, ``failover``, ``checks``,
``report``).
``harness`` wires one run together; ``cluster/cli/chaos.py`` is its command. Node
processes are started by ``cluster.local.processes``, as ``pulse up`` starts them.
"""
