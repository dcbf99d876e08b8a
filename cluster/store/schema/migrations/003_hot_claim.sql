-- Pulse schema, version 3. Runs with search_path set to the cluster's schema.
--
-- The claim's update becomes a HOT update (heap-only tuple: the new row version gets no
-- index entries) when no index names a column it changes, in its key or its predicate.
-- The claim changes status and the lease columns, so:
-- - jobs_due keys on (shard_id, next_run_at) for every job, with no predicate. A job
--   paused by its operator is kept out of the due range instead by its next_run_at, which
--   is 9999-01-01 while its status is 'paused' (resume and trigger set a real one). A
--   running job stays in the range (its next_run_at is at or before its claim), behind
--   the claim's status check: at most the nodes' concurrency of them.
-- - jobs_running is gone: recovery reads the running jobs of its shards from jobs_due,
--   bounded by the same fact.
-- - fillfactor 80 leaves room on each page for the new row versions of HOT updates (it
--   applies to pages written from now on).
-- Nodes of the previous version run against it unchanged; only their pause and
-- completion of paused jobs leave the real next_run_at, which costs reads, not safety.

ALTER TABLE jobs SET (fillfactor = 80);
UPDATE jobs SET next_run_at = '9999-01-01 00:00:00+00' WHERE status = 'paused';
DROP INDEX jobs_due;
DROP INDEX jobs_running;
CREATE INDEX jobs_due ON jobs (shard_id, next_run_at);
