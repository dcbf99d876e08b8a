-- Pulse schema, version 6: what a cluster left running for months needs. Runs with
-- search_path set to the cluster's schema. Additive: nodes of version 5 keep claiming and
-- completing beside nodes of this version (tests/integration/test_migrations.py).

-- Cluster-wide settings an operator changes at run time (`pulse config set`); values are
-- text, parsed by cluster/config/retention.py. `pulse init` seeds the defaults.
CREATE TABLE config (
    key        text PRIMARY KEY,
    value      text NOT NULL,
    updated_at timestamptz NOT NULL DEFAULT now()
);

ALTER TABLE jobs
    -- Retention of this job's runs; NULL follows the cluster's config.
    ADD COLUMN keep_for_s double precision CHECK (keep_for_s > 0),
    ADD COLUMN keep_runs integer CHECK (keep_runs >= 1),
    -- Bytes of output kept per stream (stdout, stderr, result, log) of a run.
    ADD COLUMN output_limit integer NOT NULL DEFAULT 16384
        CHECK (output_limit BETWEEN 0 AND 262144),
    -- A slot not started this long after it was due raises a `late` alert.
    ADD COLUMN late_after_s double precision NOT NULL DEFAULT 60 CHECK (late_after_s > 0),
    -- The slot a `late` alert was raised for, so it is raised once per slot.
    ADD COLUMN late_slot timestamptz,
    -- Auto-pause after this many failed slots in a row (NULL: never).
    ADD COLUMN pause_after_failures integer CHECK (pause_after_failures >= 1),
    -- Failed slots in a row; a successful slot sets it back to 0.
    ADD COLUMN failed_slots integer NOT NULL DEFAULT 0,
    -- Why the job is paused (by hand with --note, or by auto-pause).
    ADD COLUMN pause_note text;

-- What a run produced: {"stdout", "stderr", "result", "log", "truncated"}; NULL if nothing.
-- It lives in the run's row, so it goes when the run is pruned.
ALTER TABLE runs ADD COLUMN output jsonb;

-- Alerts: rules say who wants which events; events are an outbox written in the same
-- transaction as the state change they report; a delivery is one event for one rule.
CREATE TABLE alert_rules (
    name       text PRIMARY KEY CHECK (name <> ''),
    url        text NOT NULL,
    events     text[] NOT NULL,
    format     text NOT NULL DEFAULT 'json' CHECK (format IN ('json', 'slack')),
    secret_env text,  -- the NAME of a variable on the delivering node, never its value
    tenant_id  text,  -- NULL: every tenant
    job_name   text,  -- NULL: every job of the tenant scope
    created_at timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE alert_events (
    id         uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    event      text NOT NULL
               CHECK (event IN ('failed', 'recovered', 'lost', 'late', 'skipped', 'paused')),
    job_id     uuid,
    tenant_id  text NOT NULL,
    job_name   text NOT NULL,
    slot       timestamptz,
    attempt    integer,
    node_id    text,
    zone       text,
    error      text,
    detail     text,
    created_at timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE alert_deliveries (
    id              bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,  -- delivery order
    event_id        uuid NOT NULL REFERENCES alert_events (id) ON DELETE CASCADE,
    rule_name       text NOT NULL REFERENCES alert_rules (name) ON DELETE CASCADE,
    job_id          uuid,
    status          text NOT NULL DEFAULT 'pending'
                    CHECK (status IN ('pending', 'delivered', 'failed')),
    attempts        integer NOT NULL DEFAULT 0,
    next_attempt_at timestamptz NOT NULL DEFAULT now(),
    locked_by       text,
    locked_until    timestamptz,
    last_error      text,
    delivered_at    timestamptz,
    created_at      timestamptz NOT NULL DEFAULT now(),
    UNIQUE (event_id, rule_name)
);

CREATE INDEX alert_deliveries_pending ON alert_deliveries (next_attempt_at)
    WHERE status = 'pending';
CREATE INDEX alert_deliveries_by_rule_job ON alert_deliveries (rule_name, job_id, id)
    WHERE status = 'pending';
CREATE INDEX alert_events_created ON alert_events (created_at);

-- The outbox write: an event and one delivery per rule that wants it, in the caller's
-- transaction; nothing is written when no rule wants it.
CREATE FUNCTION raise_alert(
    a_event text,
    a_job_id uuid,
    a_tenant_id text,
    a_job_name text,
    a_slot timestamptz,
    a_attempt integer,
    a_node_id text,
    a_zone text,
    a_error text,
    a_detail text
) RETURNS void
LANGUAGE sql SET search_path FROM CURRENT AS $$
    WITH wanted AS (
        SELECT name FROM alert_rules
        WHERE a_event = ANY (events)
          AND (tenant_id IS NULL OR tenant_id = a_tenant_id)
          AND (job_name IS NULL OR job_name = a_job_name)
    ), event AS (
        INSERT INTO alert_events (event, job_id, tenant_id, job_name, slot, attempt, node_id,
                                  zone, error, detail)
        SELECT a_event, a_job_id, a_tenant_id, a_job_name, a_slot, a_attempt, a_node_id,
               a_zone, a_error, a_detail
        WHERE EXISTS (SELECT 1 FROM wanted)
        RETURNING id
    )
    INSERT INTO alert_deliveries (event_id, rule_name, job_id)
    SELECT event.id, wanted.name, a_job_id FROM event CROSS JOIN wanted
$$;
