-- Pulse schema, 0.3.0: every-node jobs compose with cancel and --pause-after-failures.
-- node_run_ended, re-created: a slot in which a member's run was cancelled closes
-- `cancelled`, as a cancelled ordinary run does; a slot in which a member failed or timed
-- out counts as one failed slot toward the job's
-- --pause-after-failures (and pauses it at the limit), a slot every member that ran
-- succeeded resets the count. Named to apply after `0.3.0_pre_zones_each_node`; the
-- function keeps its signature, so older nodes call it unchanged.
--
-- cancel_node_runs: `pulse runs cancel` of an each-node slot reaches every member. As the
-- owner (the web's role only reads node_runs), for one job in the caller's tenant scope:
-- each member's run of the open slot (p_slot, else every open one) is marked cancel_by; a
-- running one is returned for the caller to wake its member (NOTIFY), which stops it as an
-- ordinary run; a queued one (not started) ends at once, `cancelled`, never started. The
-- first UPDATE locks every row of the slot, so a member's claim cannot start one between.

CREATE OR REPLACE FUNCTION node_run_ended(
    e_job_id uuid,
    e_slot timestamptz,
    e_member text,
    e_status text,
    e_why text,
    e_node_id text,
    e_zone text,
    e_at timestamptz
) RETURNS text
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
DECLARE
    s node_slots;
    j jobs;
    coverage text;
    outcome text;
    ran integer;
    ok integer;
    failed integer;
    cancelled integer;
    note text;
BEGIN
    UPDATE node_slots SET pending = pending - 1,
        ended = ended || jsonb_build_object(e_member, jsonb_build_object(
            'status', e_status, 'at', e_at, 'why', e_why))
    WHERE job_id = e_job_id AND slot = e_slot AND NOT ended ? e_member
    RETURNING * INTO s;
    IF NOT FOUND OR s.pending > 0 THEN
        RETURN NULL;
    END IF;
    SELECT * INTO j FROM jobs WHERE id = e_job_id;
    coverage := node_slot_summary(s.members, s.ended);
    SELECT count(*) FILTER (WHERE v ->> 'status' <> 'missed'),
           count(*) FILTER (WHERE v ->> 'status' = 'succeeded'),
           count(*) FILTER (WHERE v ->> 'status' IN ('failed', 'timed_out')),
           count(*) FILTER (WHERE v ->> 'status' = 'cancelled')
    INTO ran, ok, failed, cancelled FROM jsonb_each(s.ended) AS e(k, v);
    outcome := CASE WHEN cancelled > 0 THEN 'cancelled'
                    WHEN ok > 0 AND ok = ran THEN 'succeeded' ELSE 'failed' END;
    PERFORM record_run(j.id, j.tenant_id, j.name, s.slot, 1, e_node_id, e_zone, outcome, NULL,
                       s.opened_at, e_at, extract(epoch FROM e_at - s.opened_at)::float8,
                       coverage,
                       jsonb_build_object('coverage', jsonb_build_object(
                           'summary', coverage, 'members', to_jsonb(s.members),
                           'ended', s.ended)),
                       s.origin, s.revision);
    IF outcome = 'succeeded' AND j.feeds THEN  -- the slot of the jobs chained after it
        PERFORM chain_release(j.id, s.slot, e_at);
    END IF;
    IF outcome = 'failed' THEN
        PERFORM raise_alert('failed', j.id, j.tenant_id, j.name, s.slot, 1, e_node_id, e_zone,
                            coverage, NULL);
    END IF;
    -- --pause-after-failures: a member's failure makes the slot one failed slot; a slot
    -- every member that ran succeeded resets the count; a cancelled slot, or one no member
    -- ran, does neither (as a cancelled or lost ordinary run). The job row is read again
    -- under its lock: two slots closing at once count one after the other.
    IF outcome = 'failed' AND failed > 0 OR outcome = 'succeeded' AND j.failed_slots > 0 THEN
        SELECT * INTO j FROM jobs WHERE id = e_job_id FOR UPDATE;
    END IF;
    IF outcome = 'failed' AND failed > 0 THEN
        IF NOT j.paused AND j.failed_slots + 1 >= j.pause_after_failures THEN
            note := 'paused after ' || j.failed_slots + 1
                || ' failed slots in a row; last error: ' || left(coverage, 300);
            UPDATE jobs SET failed_slots = failed_slots + 1, paused = true, pause_note = note,
                status = CASE WHEN status IN ('running', 'done') THEN status ELSE 'paused' END,
                next_run_at = CASE WHEN status = 'running' THEN next_run_at
                                   ELSE '9999-01-01Z'::timestamptz END,
                updated_at = e_at
            WHERE id = j.id;
            PERFORM raise_alert('paused', j.id, j.tenant_id, j.name, s.slot, 1, e_node_id,
                                e_zone, coverage, note);
        ELSE
            UPDATE jobs SET failed_slots = failed_slots + 1 WHERE id = j.id;
        END IF;
    ELSIF outcome = 'succeeded' AND j.failed_slots > 0 THEN
        UPDATE jobs SET failed_slots = 0 WHERE id = j.id;
        PERFORM raise_alert('recovered', j.id, j.tenant_id, j.name, s.slot, 1, e_node_id,
                            e_zone, NULL, 'succeeded after ' || j.failed_slots || ' failed slots');
    END IF;
    IF ran < cardinality(s.members) THEN  -- a member missed it
        PERFORM raise_alert('incomplete', j.id, j.tenant_id, j.name, s.slot, 1, e_node_id,
                            e_zone, NULL, coverage);
    END IF;
    DELETE FROM node_slots WHERE job_id = e_job_id AND slot = e_slot;
    RETURN coverage;
END $$;

DO $$
BEGIN
    EXECUTE format('ALTER FUNCTION node_run_ended(uuid, timestamptz, text, text, text, text, '
                   'text, timestamptz) SET search_path = %I, pg_temp', current_schema());
END $$;

CREATE FUNCTION cancel_node_runs(
    p_tenant text,
    p_name text,
    p_scope text,
    p_slot timestamptz,
    p_by text,
    p_now timestamptz
) RETURNS TABLE (c_job uuid, c_slot timestamptz, c_member text, c_attempt integer,
                 c_token bigint, c_started boolean)
LANGUAGE plpgsql SECURITY DEFINER AS $$
#variable_conflict use_column
DECLARE
    t timestamptz := CASE WHEN p_now IS NOT NULL
                               AND has_table_privilege(session_user, 'node_runs', 'DELETE')
                          THEN p_now ELSE now() END;
BEGIN
    UPDATE node_runs n SET cancel_by = p_by
    FROM jobs j
    WHERE j.tenant_id = p_tenant AND j.name = p_name AND n.job_id = j.id
      AND (p_scope IS NULL OR j.tenant_id = p_scope)
      AND (p_slot IS NULL OR n.slot = p_slot);
    RETURN QUERY
    SELECT n.job_id, n.slot, n.member, n.attempt, n.lease_token, true
    FROM node_runs n JOIN jobs j ON j.id = n.job_id
    WHERE j.tenant_id = p_tenant AND j.name = p_name AND n.status = 'running'
      AND n.cancel_by = p_by AND (p_slot IS NULL OR n.slot = p_slot);
    RETURN QUERY
    WITH gone AS (
        DELETE FROM node_runs n USING jobs j
        WHERE j.tenant_id = p_tenant AND j.name = p_name AND n.job_id = j.id
          AND n.status = 'queued' AND n.cancel_by = p_by
          AND (p_slot IS NULL OR n.slot = p_slot)
        RETURNING n.job_id, n.slot, n.member, n.attempt, n.lease_token
    )
    SELECT g.job_id, g.slot, g.member, g.attempt, g.lease_token, false
    FROM gone g
    CROSS JOIN LATERAL (SELECT node_run_ended(g.job_id, g.slot, g.member, 'cancelled',
                                              'cancelled by ' || p_by, NULL, NULL, t)) AS e
    ORDER BY g.slot, g.member;
END $$;

DO $$
BEGIN
    EXECUTE format('ALTER FUNCTION cancel_node_runs(text, text, text, timestamptz, text, '
                   'timestamptz) SET search_path = %I, pg_temp', current_schema());
END $$;
