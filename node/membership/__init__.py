"""Who is live and which shards this node holds: the Redis heartbeat, the shard keeper
that turns the ring into advisory locks, and the child jobs of each-zone parents."""
