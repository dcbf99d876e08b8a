-- Pulse schema, 0.3.0: a completion sees the changes made while its slot ran.
--
-- A completion plans the job's next slot in the node, with the timing, calendar and
-- windows its claim read, and records skipped the slots they skip on the way. A change of
-- either while the slot ran was not seen:
-- - a blackout window called off (or a holiday taken out) left the slots after it that the
--   old rule skipped recorded skipped, naming a window that no longer was;
-- - a new timing by apply sent the job on to the old timing's next slot, so the new
--   timing's slots after the change until then had no record.
-- jobs.rule_changed_at is when a calendar or window change last rewrote the job's copy of
-- its rule: a completion of an attempt claimed at or before it writes none of its old
-- rule's skips after it, and the job goes back to the first of them, which its claim
-- decides under the rule in force. jobs.timing_slot and timing_start are where an apply
-- that changed the timing of a running job plans it to go on (the new timing's first slot
-- after the change, and its start): the completion of the slot that ran goes there, when
-- the slot does not wait for a retry, and writes none of its walk's skips. The apply
-- records the old timing's slots between the running slot and the change, as for a slot
-- held at its gate: record_skipped, which wrote only an idle or paused job's records,
-- writes a running job's too, for slots after the one it runs (never that slot: its run
-- writes its record).
--
-- Additive: nodes of the previous release complete as before.

ALTER TABLE jobs ADD COLUMN rule_changed_at timestamptz;
ALTER TABLE jobs ADD COLUMN timing_slot timestamptz;
ALTER TABLE jobs ADD COLUMN timing_start timestamptz;

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
           OR (j.status = 'running' AND (e->>0)::timestamptz > j.slot_at))
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
