-- Pulse schema, 0.3.0: an operator's action declares a watch job's late slots missed.
--
-- An action that moves a watch job past awaited slots no ping came for (an apply of a new
-- timing, a rollback, a pause, pause --until, skip-next) recorded them skipped with its
-- reason, even those past the job's late_after_s that the late pass had not declared
-- missed yet (no node up since): their true record is a missed ping, a failed run with a
-- `late` event, as the late pass writes it. watch_declare_missed writes that record for
-- the slots the action lists, as the schema's owner (the web's role writes no runs and
-- raises no alerts), for one watch job in the caller's tenant scope: only slots at or
-- after the job's own and before its adoption, past late_after_s by the database's clock
-- (the caller's for a login that may insert runs itself, which also writes after it moved
-- the job), with no record yet.
--
-- Additive: the late pass of a node of the previous release declares the same slots.

CREATE FUNCTION watch_declare_missed(
    p_job uuid,
    p_scope text,
    p_slots timestamptz[],
    p_now timestamptz
) RETURNS TABLE (missed_slot timestamptz)
LANGUAGE plpgsql SECURITY DEFINER AS $$
DECLARE
    owner boolean := has_table_privilege(session_user, 'runs', 'INSERT');
    t timestamptz;
    j jobs;
    s timestamptz;
    err text;
BEGIN
    t := CASE WHEN owner THEN coalesce(p_now, now()) ELSE now() END;
    SELECT * INTO j FROM jobs x
    WHERE x.id = p_job AND (p_scope IS NULL OR x.tenant_id = p_scope) AND x.watch
      AND x.status IN ('idle', 'paused');
    IF NOT FOUND THEN
        RETURN;
    END IF;
    err := 'no ping within ' || j.late_after_s || 's of the slot (watch job)';
    FOREACH s IN ARRAY p_slots[1:1000] LOOP
        CONTINUE WHEN (s < j.slot_at AND NOT owner)
                   OR s >= j.adopt_at
                   OR s + make_interval(secs => j.late_after_s) >= t
                   OR EXISTS (SELECT 1 FROM runs r WHERE r.job_id = j.id AND r.scheduled_for = s);
        PERFORM record_run(j.id, j.tenant_id, j.name, s, 1, NULL, NULL, 'failed', NULL, NULL,
                           t, NULL, err, NULL, 'ping');
        PERFORM raise_alert('late', j.id, j.tenant_id, j.name, s, 1, NULL, NULL, NULL, err);
        missed_slot := s;
        RETURN NEXT;
    END LOOP;
END $$;

DO $$
BEGIN
    EXECUTE format('ALTER FUNCTION watch_declare_missed(uuid, text, timestamptz[], timestamptz) '
                   'SET search_path = %I, pg_temp', current_schema());
END $$;
