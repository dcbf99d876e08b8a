-- Pulse schema, version 11. Runs with search_path set to the cluster's schema.
--
-- Time you can shape (docs/design/time.md): a job's start jitter, and the `done` status of
-- a one-off (`@at`) job whose only slot has run. Additive: nodes of the previous release
-- ignore jitter_s (they start slots at their nominal time) and never write `done`. The
-- status check is replaced NOT VALID, as 008 does for runs: every stored row passes it.

ALTER TABLE jobs
    ADD COLUMN jitter_s double precision NOT NULL DEFAULT 0 CHECK (jitter_s >= 0),
    -- A one-off job is deleted as soon as it is done (else when its runs are pruned).
    ADD COLUMN remove_when_done boolean NOT NULL DEFAULT false;

ALTER TABLE jobs DROP CONSTRAINT jobs_status_check;
ALTER TABLE jobs ADD CONSTRAINT jobs_status_check
    CHECK (status IN ('idle', 'running', 'paused', 'done')) NOT VALID;
