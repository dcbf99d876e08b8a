-- Pulse schema, version 1. Runs with search_path set to the cluster's schema.

CREATE TABLE meta (
    key   text PRIMARY KEY,
    value text NOT NULL
);

CREATE TABLE jobs (
    id               uuid PRIMARY KEY,
    tenant_id        text NOT NULL DEFAULT 'default' CHECK (tenant_id <> ''),
    name             text NOT NULL CHECK (name <> ''),
    schedule         text NOT NULL,
    tz               text NOT NULL DEFAULT 'UTC',
    dst_repeated     text NOT NULL DEFAULT 'once' CHECK (dst_repeated IN ('once', 'twice')),
    dst_skipped      text NOT NULL DEFAULT 'shift' CHECK (dst_skipped IN ('shift', 'skip')),
    handler          text NOT NULL,
    payload          jsonb NOT NULL DEFAULT '{}'::jsonb CHECK (jsonb_typeof(payload) = 'object'),
    -- idle: waiting for next_run_at; running: claimed under a lease; paused: not claimed.
    status           text NOT NULL DEFAULT 'idle' CHECK (status IN ('idle', 'running', 'paused')),
    paused           boolean NOT NULL DEFAULT false,
    shard_id         integer NOT NULL CHECK (shard_id >= 0),
    -- next_run_at is when the job is due to be claimed; slot_at is the scheduled slot that
    -- claim runs (they differ only while a failed attempt waits out its retry backoff).
    next_run_at      timestamptz NOT NULL,
    slot_at          timestamptz NOT NULL,
    attempt          integer NOT NULL DEFAULT 1 CHECK (attempt >= 1),
    last_run_at      timestamptz,
    locked_by        text,
    locked_at        timestamptz,
    lease_expires_at timestamptz,
    lease_token      bigint NOT NULL DEFAULT 0,
    catch_up         text NOT NULL DEFAULT 'once' CHECK (catch_up IN ('skip', 'once', 'backfill')),
    grace_s          double precision NOT NULL DEFAULT 60 CHECK (grace_s >= 0),
    max_backfill     integer NOT NULL DEFAULT 100 CHECK (max_backfill >= 1),
    timeout_s        double precision NOT NULL DEFAULT 300 CHECK (timeout_s > 0),
    max_retries      integer NOT NULL DEFAULT 0 CHECK (max_retries >= 0),
    retry_backoff_s  double precision NOT NULL DEFAULT 10 CHECK (retry_backoff_s >= 0),
    created_at       timestamptz NOT NULL DEFAULT now(),
    updated_at       timestamptz NOT NULL DEFAULT now(),
    UNIQUE (tenant_id, name)
);

-- The claim's hot path: due jobs of one shard, oldest first.
CREATE INDEX jobs_due ON jobs (shard_id, next_run_at) WHERE status = 'idle';
-- Recovery: running jobs of the shards a node takes over.
CREATE INDEX jobs_running ON jobs (shard_id) WHERE status = 'running';

CREATE TABLE runs (
    id            bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    job_id        uuid NOT NULL REFERENCES jobs (id) ON DELETE CASCADE,
    tenant_id     text NOT NULL,
    job_name      text NOT NULL,
    scheduled_for timestamptz NOT NULL,
    attempt       integer NOT NULL DEFAULT 1,
    node_id       text,
    zone          text,
    status        text NOT NULL
                  CHECK (status IN ('running', 'succeeded', 'failed', 'timed_out', 'skipped', 'lost')),
    lease_token   bigint,
    started_at    timestamptz,
    finished_at   timestamptz,
    duration_s    double precision,
    last_error    text,
    UNIQUE (job_id, scheduled_for)
);

-- Recent runs of a job use UNIQUE (job_id, scheduled_for) backwards.
CREATE INDEX runs_by_status ON runs (status, scheduled_for DESC);
CREATE INDEX runs_recent ON runs (scheduled_for DESC);
