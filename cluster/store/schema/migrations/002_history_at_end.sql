-- Pulse schema, version 2. Runs with search_path set to the cluster's schema.
--
-- A slot's run row is written when an attempt ends (completed, released or recovered),
-- not when it is claimed: while an attempt is in flight the job row is its only record
-- (locked_by, locked_at, slot_at, attempt, lease_token). locked_zone adds the zone of the
-- node running it, which the run row of that attempt records. Like locked_by and
-- locked_at it is set by the claim and cleared when the attempt ends.
-- Additive: nodes of the previous version run against it unchanged.

ALTER TABLE jobs ADD COLUMN locked_zone text;

-- Runs by status serve `pulse runs --status failed` and the like: the rare outcomes. The
-- common one, succeeded, is found through runs_recent (the newest runs are mostly
-- successes), so successes, nearly every row written, skip this index.
DROP INDEX runs_by_status;
CREATE INDEX runs_by_status ON runs (status, scheduled_for DESC) WHERE status <> 'succeeded';
