"""The cluster's health as operators read it: one snapshot of members, shard coverage,
backlog, fire lag and outcomes, joined from Redis and Postgres (``pulse status``, the API)."""
