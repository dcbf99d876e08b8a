"""Reading a cluster from outside: the rows behind ``pulse status`` (``snapshot``), the
chaos harness's and tests' diagnostics, and the chaos ledger table its effect jobs write.
Nothing here is on a node's path."""
