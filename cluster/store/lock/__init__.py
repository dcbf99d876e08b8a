"""The node's hot path in Postgres: its lock session (shard locks, claims, renewals,
recoveries, flights), its life lock, its result writer with the fenced completions, the run
records that cross between them, and handler transactions committed with a completion. What
runs here runs once per fire: it is the code the claim and completion figures measure."""
