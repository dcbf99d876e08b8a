"""Running Pulse on one machine: node processes (``processes``), the ``pulse up`` launcher,
and embedded Postgres and Redis servers."""
