-- Pulse schema, 0.3.0: a change of a job's rule takes back the skips the old one recorded ahead.
--
-- A job's calendar and blackout windows record the slots they skip when the job plans past
-- them, ahead of their time (a weekend's on Friday). A calendar or window change, and an
-- apply that changes the job's timing, plan the job again under the new rule; the old
-- rule's records of slots still to come said what that rule would do, and stayed: the job
-- did not run those slots, and their reason named a holiday or a window that no longer was.
-- withdraw_rule_skips deletes them, for one idle job on its first attempt in the caller's
-- tenant scope that the change moves (not triggered, not paused until a time to come):
-- `skipped` rows whose reason is a calendar's or a window's, of slots after the clock
-- (the database's, or the caller's for a login that may delete runs itself). A slot whose
-- time has come keeps its record, as does every other skip ahead (skip-next's). As the
-- owner: the web's role writes no runs, and applies jobs.
--
-- Additive: nodes and webs of the previous release do not call it.

CREATE FUNCTION withdraw_rule_skips(
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
      AND j.status = 'idle' AND j.attempt = 1 AND j.slot_origin IS DISTINCT FROM 'trigger'
      AND (j.paused_until IS NULL OR j.paused_until <= coalesce(p_now, now()))
    RETURNING r.scheduled_for
$$;

-- A definer's search_path: the schema, then pg_temp (never a caller's temporary table first).
DO $$
BEGIN
    EXECUTE format('ALTER FUNCTION withdraw_rule_skips(uuid, text, timestamptz) '
                   'SET search_path = %I, pg_temp', current_schema());
END $$;
