-- Pulse schema, 0.3.0: a job paused until a time has its skips ahead taken back by a change
-- of its rule too.
--
-- withdraw_rule_skips (0.3.0_pre_zzzzzzz_withdraw_paused) left a job paused until a time to
-- come out: a calendar or window change did not plan it again, so the skips its old rule had
-- recorded after that time stayed, for a window removed or a holiday taken out. Such a job
-- is now planned again from the end of its pause, so its skips ahead are taken back as an
-- idle job's; none of them lies inside the pause, whose slots are not recorded. Named to sort after the migration it
-- re-creates a function of. Additive.

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
               AND j.slot_origin IS DISTINCT FROM 'trigger'))
    RETURNING r.scheduled_for
$$;

-- A definer's search_path: the schema, then pg_temp (never a caller's temporary table first).
DO $$
BEGIN
    EXECUTE format('ALTER FUNCTION withdraw_rule_skips(uuid, text, timestamptz) '
                   'SET search_path = %I, pg_temp', current_schema());
END $$;
