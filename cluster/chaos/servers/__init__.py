"""Throwaway servers a chaos run stops, cuts and fails over at will: plain Postgres and
Redis (``standalone``), a pg_auto_failover formation (``pgha``), a Redis Sentinel set
(``sentinel``), what those two share (``serverset``), the Debian packages they need
(``packages``) and the controllable TCP proxy between a node and a server (``proxy``)."""
