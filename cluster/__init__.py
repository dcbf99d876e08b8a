"""What the whole Pulse cluster shares, and every I/O adapter.

Settings, schema and migrations, the SQL (``store/sql/*.sql``), the job store and its Python
API (``cluster.store.jobstore.store.JobStore``), the lock session, the Redis member registry,
schedule math, and the admin CLI. Only this package talks to psycopg and redis.
"""
