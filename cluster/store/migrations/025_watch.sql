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
LANGUAGE plpgsql SECURITY DEFINER SET search_path FROM CURRENT AS $$
DECLARE
    j jobs;
BEGIN
    SELECT * INTO j FROM jobs WHERE ping_hash = p_hash;
    IF NOT FOUND OR p_kind NOT IN ('start', 'success', 'fail') THEN
        RETURN NULL;
    END IF;
    IF j.adopt_at IS NOT NULL AND p_slot >= j.adopt_at THEN
        INSERT INTO watch_doubles (job_id, tenant_id, job_name, slot, kind, pinged_at)
        VALUES (j.id, j.tenant_id, j.name, p_slot, p_kind, p_finished_at);
        PERFORM raise_alert('double_run', j.id, j.tenant_id, j.name, p_slot, NULL, NULL, NULL,
                            NULL, 'a legacy ' || p_kind || ' ping arrived for a slot Pulse runs');
        RETURN 'double_run';
    END IF;
    PERFORM record_run(j.id, j.tenant_id, j.name, p_slot, 1, NULL, NULL,
                       CASE p_kind WHEN 'start' THEN 'running'
                                   WHEN 'success' THEN 'succeeded' ELSE 'failed' END,
                       NULL, p_started_at,
                       CASE WHEN p_kind = 'start' THEN NULL ELSE p_finished_at END,
                       CASE WHEN p_kind = 'start' OR p_started_at IS NULL THEN NULL
                            ELSE extract(epoch FROM p_finished_at - p_started_at)::float8 END,
                       p_error, p_output, 'ping');
    IF p_late IS NOT NULL AND j.late_slot IS DISTINCT FROM p_slot THEN
        PERFORM raise_alert('late', j.id, j.tenant_id, j.name, p_slot, 1, NULL, NULL, NULL,
                            p_late);
    END IF;
    RETURN 'recorded';
END $$;
