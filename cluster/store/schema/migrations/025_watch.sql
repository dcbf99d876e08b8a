-- Pulse schema, version 25: watch jobs, their pings and their adoption (docs/design/watch.md).
--
-- A watch job is a job row that no node ever claims: it lives in WATCH_SHARD (ring/zones.py,
-- 2^31 - 2), a shard no node locks, so the claim statement is unchanged and pays nothing
-- for it. Its next_run_at is the next slot a ping is expected for; the late pass reads
-- that one shard. ping_hash is the sha256 of its ping token (the token is never stored).
-- adopt_at: the first slot Pulse runs itself (`pulse jobs adopt`); slots before it stay
-- watched, and a ping for a slot from it on is a double run, kept in watch_doubles.
-- Additive: nodes of the previous release never lock WATCH_SHARD, so they neither claim
-- watch jobs nor report them late.

ALTER TABLE jobs ADD COLUMN watch boolean NOT NULL DEFAULT false;
ALTER TABLE jobs ADD COLUMN ping_hash bytea CHECK (octet_length(ping_hash) = 32);
ALTER TABLE jobs ADD COLUMN adopt_at timestamptz;
-- The slot a /start ping opened that no end ping has closed yet.
ALTER TABLE jobs ADD COLUMN ping_open timestamptz;

CREATE UNIQUE INDEX jobs_ping ON jobs (ping_hash) WHERE ping_hash IS NOT NULL;

-- A legacy ping for a slot Pulse ran (or runs) itself.
CREATE TABLE watch_doubles (
    id        bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    job_id    uuid NOT NULL REFERENCES jobs (id) ON DELETE CASCADE,
    tenant_id text NOT NULL,
    job_name  text NOT NULL,
    slot      timestamptz NOT NULL,
    kind      text NOT NULL CHECK (kind IN ('start', 'success', 'fail')),
    pinged_at timestamptz NOT NULL DEFAULT now()
);

CREATE INDEX watch_doubles_job ON watch_doubles (job_id, slot);

-- The new event; replaced NOT VALID as 008 does for runs: every stored row passes it. The
-- run-time expectations' events (migration 024) are listed too, so the two merge in any order.
ALTER TABLE alert_events DROP CONSTRAINT alert_events_event_check;
ALTER TABLE alert_events ADD CONSTRAINT alert_events_event_check
    CHECK (event IN ('failed', 'recovered', 'lost', 'late', 'skipped', 'paused', 'slow',
                     'overdue', 'too_fast', 'assertion_failed', 'double_run')) NOT VALID;

-- What a ping writes, for the web, whose role may not write runs or alert events itself:
-- only the run of the job whose token hash it presents, and only a watched slot's; a slot
-- from adopt_at on is recorded as a double run and raises `double_run` instead. p_late: the
-- `late` event's detail when the ping came for the awaited slot past its late_after_s
-- (before the late pass saw it). Returns 'recorded', 'double_run', or NULL for an unknown
-- hash.
CREATE FUNCTION watch_record(
    p_hash bytea,
    p_slot timestamptz,
    p_kind text,
    p_started_at timestamptz,
    p_finished_at timestamptz,
    p_output jsonb,
    p_error text,
    p_late text
) RETURNS text
LANGUAGE plpgsql SECURITY DEFINER AS $$
DECLARE
    j jobs;
    v_event text;
    v_detail text;
BEGIN
    SELECT * INTO j FROM jobs WHERE ping_hash = p_hash;
    IF NOT FOUND OR p_kind NOT IN ('start', 'success', 'fail') THEN
        RETURN NULL;
    END IF;
    IF j.adopt_at IS NOT NULL AND p_slot >= j.adopt_at THEN
        INSERT INTO watch_doubles (job_id, tenant_id, job_name, slot, kind, pinged_at)
        VALUES (j.id, j.tenant_id, j.name, p_slot, p_kind, p_finished_at);
        v_event := 'double_run';
        v_detail := 'a legacy ' || p_kind || ' ping arrived for a slot Pulse runs';
    ELSE
        -- As record_run does, written out: this function runs as the owner, and calls
        -- nothing whose search_path a caller's temporary tables could come first in.
        INSERT INTO runs AS r (job_id, tenant_id, job_name, scheduled_for, attempt, status,
                               started_at, finished_at, duration_s, last_error, output, origin)
        VALUES (j.id, j.tenant_id, j.name, p_slot, 1,
                CASE p_kind WHEN 'start' THEN 'running'
                            WHEN 'success' THEN 'succeeded' ELSE 'failed' END,
                p_started_at, CASE WHEN p_kind = 'start' THEN NULL ELSE p_finished_at END,
                CASE WHEN p_kind = 'start' OR p_started_at IS NULL THEN NULL
                     ELSE extract(epoch FROM p_finished_at - p_started_at)::float8 END,
                p_error, p_output, 'ping')
        ON CONFLICT (job_id, scheduled_for) DO UPDATE SET
            attempt = excluded.attempt, node_id = NULL, zone = NULL, status = excluded.status,
            lease_token = NULL, started_at = excluded.started_at,
            finished_at = excluded.finished_at, duration_s = excluded.duration_s,
            last_error = excluded.last_error, output = excluded.output, origin = excluded.origin;
        IF p_late IS NULL OR j.late_slot IS NOT DISTINCT FROM p_slot THEN
            RETURN 'recorded';
        END IF;
        v_event := 'late';
        v_detail := p_late;
    END IF;
    -- As raise_alert does: an event only if a rule wants it, and its deliveries.
    WITH wanted AS (
        SELECT name FROM alert_rules
        WHERE v_event = ANY (events)
          AND (tenant_id IS NULL OR tenant_id = j.tenant_id)
          AND (job_name IS NULL OR job_name = j.name)
    ), raised AS (
        INSERT INTO alert_events (event, job_id, tenant_id, job_name, slot, attempt, detail)
        SELECT v_event, j.id, j.tenant_id, j.name, p_slot,
               CASE WHEN v_event = 'late' THEN 1 END, v_detail
        WHERE EXISTS (SELECT 1 FROM wanted)
        RETURNING id
    )
    INSERT INTO alert_deliveries (event_id, rule_name, job_id)
    SELECT raised.id, wanted.name, j.id FROM raised CROSS JOIN wanted;
    RETURN CASE WHEN v_event = 'double_run' THEN 'double_run' ELSE 'recorded' END;
END $$;

-- A definer's search_path: the schema, then pg_temp (never a caller's temporary table first).
DO $$
BEGIN
    EXECUTE format('ALTER FUNCTION watch_record(bytea, timestamptz, text, timestamptz, '
                   'timestamptz, jsonb, text, text) SET search_path = %I, pg_temp',
                   current_schema());
END $$;
