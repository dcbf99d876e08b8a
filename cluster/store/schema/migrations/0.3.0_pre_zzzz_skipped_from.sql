-- Pulse schema, 0.3.0: a skipped record can stand for the slots before it that have no row.
--
-- After a long outage, catch-up and an apply that moves an overdue job record at most the
-- newest 1,000 slots they pass, one row each; the oldest of those rows said in its reason
-- how many older slots were skipped too, but nothing said which, so `pulse audit` called
-- them missing. runs.skipped_from makes it exact: on a `skipped` row, every slot of the job
-- from skipped_from up to the row's own that has no row of its own was skipped too, for
-- the reason the row gives. An operator's re-run of that slot later keeps it: the slots
-- before were skipped all the same. The audit reads such rows through runs_skipped_from,
-- which holds them alone (building it reads the table once).
--
-- record_skipped (0.3.0_pre_web_skips_and_triggers) takes the time as an element of an
-- entry, [slot, reason, skipped_from], honoured from the job's own slot on and up to the
-- database's clock (slots passed already, as an outage's are), or at any time for a login
-- that may insert runs itself; never after the entry's own slot. Named to sort after the
-- 0.3.0 migrations before it, as it re-creates a function of one. Additive: nodes and webs
-- of the previous release write and read runs by their columns, and send entries of two
-- elements.

ALTER TABLE runs ADD COLUMN skipped_from timestamptz;
-- NOT VALID: the column is new, every row holds NULL; no scan under lock to prove it.
ALTER TABLE runs ADD CONSTRAINT runs_skipped_from_check
    CHECK (skipped_from < scheduled_for) NOT VALID;
CREATE INDEX runs_skipped_from ON runs (job_id, scheduled_for) WHERE skipped_from IS NOT NULL;

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
      AND j.status IN ('idle', 'paused')
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
