-- Pulse schema, version 8. Runs with search_path set to the cluster's schema.
--
-- Runs you can steer: a job's overlap policy and cancel grace, a cancellation request on a
-- running job, and the `cancelled` run status. Additive: nodes of the previous release
-- ignore the new columns (they neither see nor clear a cancel request) and never write
-- `cancelled`. The status check is replaced NOT VALID: every stored row already passes
-- the wider check, and validating it would scan the whole runs table under a lock.

ALTER TABLE jobs
    ADD COLUMN overlap text NOT NULL DEFAULT 'forbid'
        CHECK (overlap IN ('forbid', 'allow', 'replace')),
    ADD COLUMN max_concurrent integer NOT NULL DEFAULT 10 CHECK (max_concurrent >= 1),
    ADD COLUMN cancel_grace_s double precision NOT NULL DEFAULT 10 CHECK (cancel_grace_s >= 0),
    -- Who asked to cancel the running claim (NULL: nobody). Every statement that ends a
    -- claim clears it, so a request never outlives the run it was made for.
    ADD COLUMN cancel_by text;

ALTER TABLE runs DROP CONSTRAINT runs_status_check;
ALTER TABLE runs ADD CONSTRAINT runs_status_check
    CHECK (status IN ('running', 'succeeded', 'failed', 'timed_out', 'skipped', 'lost',
                      'cancelled')) NOT VALID;
