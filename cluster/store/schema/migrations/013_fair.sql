-- Pulse schema, version 13: fair fan-out across tenants (docs/design/fairness.md).
--
-- When more jobs are due in a node's shards than it can run, its claim takes them across
-- tenants in turn. It finds the tenants with jobs in each held shard by a loose scan of
-- this index (one probe per tenant), then each tenant's oldest due jobs there. The claim
-- writes none of these columns, so it stays a HOT update (003_hot_claim.sql).
CREATE INDEX jobs_tenant_due ON jobs (shard_id, tenant_id, next_run_at);
