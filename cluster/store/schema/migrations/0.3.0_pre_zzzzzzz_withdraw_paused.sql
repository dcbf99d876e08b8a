-- Pulse schema, 0.3.0: a paused job's skips ahead are taken back by a change of its rule too.
--
-- withdraw_rule_skips (0.3.0_pre_zzzzzz_withdraw_rule_skips) took back a calendar's or a
-- window's skips recorded ahead only for an idle job. A job paused after they were written
-- kept them through a change of its calendar or windows, and its resume, which plans it past
-- every record ahead, went on after them: the slots stayed skipped for a window removed or a
-- holiday taken out. A paused job is planned afresh when it resumes, and records then what
-- its rule skips before its next slot, so its skips ahead are taken back as an idle job's.
-- Named to sort after the migration it re-creates a function of. Additive.

CREATE OR REPLACE FUNCTION withdraw_rule_skips(
    p_job uuid,
    p_scope text,
    p_now timestamptz
) RETURNS TABLE (withdrawn_slot timestamptz)
LANGUAGE sql SECURITY DEFINER AS $$
    DELETE FROM runs r
    USING jobs j
    WHERE j.id = p_job AND (p_scope IS NULL OR j.tenant_id = p_scope) AND r.job_id = j.id
      AND r.status = 'skipped'
      AND (r.last_error LIKE 'calendar %' OR r.last_error LIKE 'blackout window %')
      AND r.scheduled_for > CASE WHEN has_table_privilege(session_user, 'runs', 'DELETE')
                                 THEN coalesce(p_now, now()) ELSE now() END
      AND (j.status = 'paused'
           OR (j.status = 'idle' AND j.attempt = 1
               AND j.slot_origin IS DISTINCT FROM 'trigger'
               AND (j.paused_until IS NULL OR j.paused_until <= coalesce(p_now, now()))))
    RETURNING r.scheduled_for
$$;

-- A definer's search_path: the schema, then pg_temp (never a caller's temporary table first).
DO $$
BEGIN
    EXECUTE format('ALTER FUNCTION withdraw_rule_skips(uuid, text, timestamptz) '
                   'SET search_path = %I, pg_temp', current_schema());
END $$;
