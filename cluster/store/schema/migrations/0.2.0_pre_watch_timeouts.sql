-- Pulse schema, 0.2.0: a watch run that never ends fails at its timeout.
--
-- A run a /start ping opened is `running` until its end ping. When none comes within the
-- job's timeout, watch_time_out records it `timed_out` and raises `failed`, as a node does
-- for a run of its own: called by the late pass of any node, or by the end ping that comes
-- too late (watch_end). It changes only a run still `running`, under the row's lock, so it
-- happens once however many callers try. A terminal run is never rewritten by a ping: a
-- late end ping is noted on its run (watch_end), and `pulse runs cancel` records a watched
-- run `cancelled` (watch_cancel). Additive: nodes and webs of the previous release call
-- none of these, and their pings keep working as before.

-- A watched run past its timeout, closed as if its run had been stopped then: finished at
-- started_at + timeout, one `failed` event. False when it is not running or not overdue.
-- Invoker (the node's late pass); watch_end runs it as the owner, so it writes its event
-- as raise_alert does rather than calling it, whose search_path would let a caller's
-- temporary tables come first, and has the definers' search_path.
CREATE FUNCTION watch_time_out(p_run_id bigint, p_now timestamptz) RETURNS boolean
LANGUAGE plpgsql AS $$
DECLARE
    c record;
BEGIN
    UPDATE runs r SET
        status = 'timed_out',
        finished_at = r.started_at + make_interval(secs => j.timeout_s),
        duration_s = j.timeout_s,
        last_error = 'no end ping within ' || j.timeout_s || 's of its /start (watch job)'
    FROM jobs j
    WHERE r.id = p_run_id AND j.id = r.job_id AND r.status = 'running' AND r.origin = 'ping'
      AND r.started_at + make_interval(secs => j.timeout_s) < p_now
    RETURNING r.job_id, r.tenant_id, r.job_name, r.scheduled_for, r.attempt, r.last_error
    INTO c;
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    WITH wanted AS (
        SELECT name FROM alert_rules
        WHERE 'failed' = ANY (events)
          AND (tenant_id IS NULL OR tenant_id = c.tenant_id)
          AND (job_name IS NULL OR job_name = c.job_name)
    ), raised AS (
        INSERT INTO alert_events (event, job_id, tenant_id, job_name, slot, attempt, error)
        SELECT 'failed', c.job_id, c.tenant_id, c.job_name, c.scheduled_for, c.attempt,
               c.last_error
        WHERE EXISTS (SELECT 1 FROM wanted)
        RETURNING id
    )
    INSERT INTO alert_deliveries (event_id, rule_name, job_id)
    SELECT raised.id, wanted.name, c.job_id FROM raised CROSS JOIN wanted;
    IF FOUND THEN  -- delivered at commit, as raise_alert wakes the nodes (migration 028)
        PERFORM pg_notify(current_schema() || '_wake', 'alerts');
    END IF;
    RETURN true;
END $$;

-- An end ping (p_kind success or fail) for the run of p_slot that a /start opened, for the
-- web, whose role may not write runs: only a run of the job whose token hash it presents.
-- In time: the run ends as the ping says ('recorded'). Past the timeout, or after the run
-- was cancelled: the run keeps its outcome (timed out first if no pass did it yet), and
-- the ping is noted on it, its body kept as the output ('late'). NULL: no such run, or one
-- an end ping ended already (the caller files the ping by its time).
CREATE FUNCTION watch_end(
    p_hash bytea,
    p_slot timestamptz,
    p_kind text,
    p_at timestamptz,
    p_output jsonb,
    p_error text
) RETURNS text
LANGUAGE plpgsql SECURITY DEFINER AS $$
DECLARE
    j jobs;
    r runs;
BEGIN
    SELECT * INTO j FROM jobs WHERE ping_hash = p_hash;
    IF NOT FOUND OR p_kind NOT IN ('success', 'fail') THEN
        RETURN NULL;
    END IF;
    SELECT * INTO r FROM runs
    WHERE job_id = j.id AND scheduled_for = p_slot AND origin = 'ping'
      AND started_at IS NOT NULL
    FOR UPDATE;
    IF NOT FOUND THEN
        RETURN NULL;
    END IF;
    IF r.status = 'running' AND p_at <= r.started_at + make_interval(secs => j.timeout_s) THEN
        UPDATE runs SET
            status = CASE p_kind WHEN 'success' THEN 'succeeded' ELSE 'failed' END,
            finished_at = p_at,
            duration_s = extract(epoch FROM p_at - r.started_at)::float8,
            last_error = p_error,
            output = p_output
        WHERE id = r.id;
        RETURN 'recorded';
    END IF;
    IF r.status = 'running' THEN
        PERFORM watch_time_out(r.id, p_at);
        SELECT * INTO r FROM runs WHERE id = r.id;
    END IF;
    IF r.status NOT IN ('timed_out', 'cancelled') THEN
        RETURN NULL;
    END IF;
    UPDATE runs SET
        last_error = concat_ws('; ', r.last_error, 'its end ping (' || p_kind || ') came '
                               || round(extract(epoch FROM p_at - r.started_at))
                               || 's after its /start'),
        output = coalesce(p_output, r.output)
    WHERE id = r.id;
    RETURN 'late';
END $$;

-- `pulse runs cancel` of a watch job: its runs still `running` (the one of p_slot, or
-- each) are recorded cancelled by p_by; Pulse cannot stop a process it does not run. For
-- the web too, in the caller's tenant scope (p_scope), as every statement on jobs is.
CREATE FUNCTION watch_cancel(
    p_tenant text,
    p_name text,
    p_scope text,
    p_slot timestamptz,
    p_by text
) RETURNS TABLE (cancelled_slot timestamptz)
LANGUAGE sql SECURITY DEFINER AS $$
    UPDATE runs r SET
        status = 'cancelled',
        finished_at = now(),
        duration_s = extract(epoch FROM now() - r.started_at)::float8,
        last_error = 'cancelled by ' || p_by
                     || ' (a watched run: Pulse does not stop its process)'
    FROM jobs j
    WHERE j.tenant_id = p_tenant AND j.name = p_name
      AND (p_scope IS NULL OR j.tenant_id = p_scope)
      AND r.job_id = j.id AND r.status = 'running' AND r.origin = 'ping'
      AND (p_slot IS NULL OR r.scheduled_for = p_slot)
    RETURNING r.scheduled_for
$$;

-- Definers' search_path: the schema, then pg_temp (never a caller's temporary table first).
DO $$
BEGIN
    EXECUTE format('ALTER FUNCTION watch_time_out(bigint, timestamptz) '
                   'SET search_path = %I, pg_temp', current_schema());
    EXECUTE format('ALTER FUNCTION watch_end(bytea, timestamptz, text, timestamptz, jsonb, '
                   'text) SET search_path = %I, pg_temp', current_schema());
    EXECUTE format('ALTER FUNCTION watch_cancel(text, text, text, timestamptz, text) '
                   'SET search_path = %I, pg_temp', current_schema());
END $$;
