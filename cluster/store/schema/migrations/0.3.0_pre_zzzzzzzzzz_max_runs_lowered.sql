-- Pulse schema, 0.3.0: an apply that lowers a job's max_runs to the runs it ran makes it
-- done at once (upsert_jobs; before, it ran once more), and records skipped the slots it
-- owed by then, as a pause does. The apply records them after its upsert, from the rows
-- it returns: record_skipped, which wrote only an idle, paused or running job's records,
-- writes a done job's too, for slots at or after the one it stopped at.
--
-- Additive: nodes of the previous release read a done job as before.

CREATE OR REPLACE FUNCTION record_skipped(
    p_job uuid,
    p_scope text,
    p_skips json,
    p_now timestamptz
) RETURNS TABLE (skipped_slot timestamptz)
LANGUAGE sql SECURITY DEFINER AS $$
    INSERT INTO runs (job_id, tenant_id, job_name, scheduled_for, attempt, status,
                      finished_at, last_error, skipped_from)
    SELECT j.id, j.tenant_id, j.name, (e->>0)::timestamptz, 1, 'skipped',
           coalesce(p_now, now()), e->>1,
           CASE WHEN (e->>2)::timestamptz >= j.slot_at AND (e->>2)::timestamptz <= now()
                     OR has_table_privilege(session_user, 'runs', 'INSERT')
                THEN (e->>2)::timestamptz END
    FROM jobs j CROSS JOIN json_array_elements(p_skips) AS e
    WHERE j.id = p_job AND (p_scope IS NULL OR j.tenant_id = p_scope)
      AND (j.status IN ('idle', 'paused')
           OR (j.status = 'running' AND (e->>0)::timestamptz > j.slot_at)
           OR (j.status = 'done' AND (e->>0)::timestamptz >= j.slot_at))
      AND ((e->>0)::timestamptz >= j.slot_at OR (e->>0)::timestamptz > now()
           OR has_table_privilege(session_user, 'runs', 'INSERT'))
      AND nullif(e->>1, '') IS NOT NULL
      AND ((e->>2) IS NULL OR (e->>2)::timestamptz < (e->>0)::timestamptz)
    ON CONFLICT (job_id, scheduled_for) DO NOTHING
    RETURNING scheduled_for
$$;

-- A definer's search_path: the schema, then pg_temp (never a caller's temporary table first).
DO $$
BEGIN
    EXECUTE format('ALTER FUNCTION record_skipped(uuid, text, json, timestamptz) '
                   'SET search_path = %I, pg_temp', current_schema());
END $$;
