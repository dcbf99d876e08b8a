-- Pulse schema, 0.3.0: a ping never rewrites a terminal record of its slot.
--
-- watch_record wrote a ping's run with INSERT ... ON CONFLICT DO UPDATE, so a ping that
-- came after the late pass had declared its slot missed replaced the `failed` record (and
-- a second end ping replaced the first). The slot ledger keeps a terminal record as it is:
-- now only a run still `running` (a /start) is completed by a ping; on a terminal one the
-- ping is noted in its error, its body kept as the output if the run has none, and the
-- ping answers 'late', as watch_end does for an end ping past its timeout. The signature
-- and grants stay; nodes and webs of the previous release call it as before.

CREATE OR REPLACE FUNCTION watch_record(
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
            last_error = excluded.last_error, output = excluded.output, origin = excluded.origin
        WHERE r.status = 'running';
        IF NOT FOUND THEN  -- the slot's record is terminal: the ping is noted on it
            UPDATE runs SET
                last_error = concat_ws('; ', last_error, 'a ' || p_kind || ' ping came '
                                       || round(extract(epoch FROM p_finished_at - p_slot))
                                       || 's after its slot'),
                output = coalesce(output, p_output)
            WHERE job_id = j.id AND scheduled_for = p_slot;
            RETURN 'late';
        END IF;
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

-- CREATE OR REPLACE resets the function's settings: the definer's search_path again.
DO $$
BEGIN
    EXECUTE format('ALTER FUNCTION watch_record(bytea, timestamptz, text, timestamptz, '
                   'timestamptz, jsonb, text, text) SET search_path = %I, pg_temp',
                   current_schema());
END $$;
