-- Pulse schema, version 11. Runs with search_path set to the cluster's schema.
--
-- Time you can shape (docs/design/time.md): a job's start jitter, and the `done` status of
-- a one-off (`@at`) job whose only slot has run. Additive: nodes of the previous release
-- ignore jitter_s (they start slots at their nominal time) and never write `done`. The
-- status check is replaced NOT VALID, as 008 does for runs: every stored row passes it.

ALTER TABLE jobs
    ADD COLUMN jitter_s double precision NOT NULL DEFAULT 0 CHECK (jitter_s >= 0),
    -- A one-off job is deleted as soon as it is done (else when its runs are pruned).
    ADD COLUMN remove_when_done boolean NOT NULL DEFAULT false,
    -- Why the job's current slot is due, for its run row: 'trigger' (pulse jobs trigger),
    -- 'catch-up' (reached after catch-up skipped slots), NULL: its schedule.
    ADD COLUMN slot_origin text;

ALTER TABLE jobs DROP CONSTRAINT jobs_status_check;
ALTER TABLE jobs ADD CONSTRAINT jobs_status_check
    CHECK (status IN ('idle', 'running', 'paused', 'done')) NOT VALID;

-- Backfills: a request to run a job's slots of [range_from, range_to) again, oldest first.
-- The request and its cursor are rows, so it survives any node and the whole cluster; the
-- nodes holding the job's shard turn its next slots into queued flights (origin
-- `backfill`), at most max_parallel in flight, which claim_flights runs like any flight
-- (docs/design/time.md). cursor: the slots before it are queued or left out.
CREATE TABLE backfills (
    id            bigserial PRIMARY KEY,
    job_id        uuid NOT NULL REFERENCES jobs (id) ON DELETE CASCADE,
    tenant_id     text NOT NULL,
    job_name      text NOT NULL,
    shard_id      integer NOT NULL CHECK (shard_id >= 0),
    range_from    timestamptz NOT NULL,
    range_to      timestamptz NOT NULL CHECK (range_to > range_from),
    cursor_at     timestamptz NOT NULL,
    only_missing  boolean NOT NULL DEFAULT false,
    max_parallel  integer NOT NULL DEFAULT 1 CHECK (max_parallel >= 1),
    slots_total   integer NOT NULL CHECK (slots_total >= 0),
    slots_queued  integer NOT NULL DEFAULT 0,
    status        text NOT NULL DEFAULT 'active'
                  CHECK (status IN ('active', 'done', 'cancelled')),
    created_at    timestamptz NOT NULL DEFAULT now(),
    updated_at    timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX backfills_active ON backfills (shard_id) WHERE status = 'active';

-- Who asked for a slot: NULL is the schedule (and every run before this version).
ALTER TABLE flights
    ADD COLUMN origin text,
    ADD COLUMN backfill_id bigint REFERENCES backfills (id) ON DELETE SET NULL;
CREATE INDEX flights_by_backfill ON flights (backfill_id) WHERE backfill_id IS NOT NULL;
ALTER TABLE runs ADD COLUMN origin text;

-- record_run with the run's origin; the version without it (007) stays for older nodes.
CREATE FUNCTION record_run(
    run_job_id uuid,
    run_tenant_id text,
    run_job_name text,
    run_scheduled_for timestamptz,
    run_attempt integer,
    run_node_id text,
    run_zone text,
    run_status text,
    run_lease_token bigint,
    run_started_at timestamptz,
    run_finished_at timestamptz,
    run_duration_s double precision,
    run_last_error text,
    run_output jsonb,
    run_origin text
) RETURNS void
LANGUAGE sql SET search_path FROM CURRENT AS $$
    INSERT INTO runs AS r (job_id, tenant_id, job_name, scheduled_for, attempt, node_id, zone,
                           status, lease_token, started_at, finished_at, duration_s,
                           last_error, output, origin)
    VALUES (run_job_id, run_tenant_id, run_job_name, run_scheduled_for, run_attempt,
            run_node_id, run_zone, run_status, run_lease_token, run_started_at,
            run_finished_at, run_duration_s, run_last_error, run_output, run_origin)
    ON CONFLICT (job_id, scheduled_for) DO UPDATE SET
        attempt = excluded.attempt,
        node_id = excluded.node_id,
        zone = excluded.zone,
        status = excluded.status,
        lease_token = excluded.lease_token,
        started_at = excluded.started_at,
        finished_at = excluded.finished_at,
        duration_s = excluded.duration_s,
        last_error = excluded.last_error,
        output = excluded.output,
        origin = excluded.origin
$$;
