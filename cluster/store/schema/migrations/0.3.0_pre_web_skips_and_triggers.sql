-- Pulse schema, 0.3.0: the skipped records and triggered flights the web's writes make, as
-- the owner.
--
-- A pause (`pause`, `pause --until`) of a job that owes slots (held at its gate, deferred
-- by a window, due) records them skipped before it moves the job past them; skip-next
-- records the job's next slots skipped ahead of time; a job created or planned afresh
-- records the slots its calendar or windows skip before its first one (a job created on a
-- Saturday: the weekend's). All of them insert runs, which the web's role may not (least
-- privilege: it writes no history), so over the API they failed with permission denied.
-- record_skipped writes them as the owner, and nothing else: `skipped` rows only, each
-- with a reason, for one idle or paused job in the caller's tenant scope (p_scope), never
-- over a record (ON CONFLICT DO NOTHING), and only for slots still to be decided: at or
-- after the slot the job holds, or still to come by the database's clock. A past slot
-- before the job's own is history: only a login that may insert runs itself (the owner, a
-- node, on an explicit clock) writes one through it.
--
-- A trigger that queues a flight (with a payload, of a gated or chained job, of a job
-- skip-next moved past recorded slots) inserts into flights, which the web's role may not
-- either. trigger_flight queues it as the owner, and only that: one flight of origin
-- `trigger`, queued, for one job in the caller's tenant scope, at the database's clock
-- (an explicit p_now only for a login that may insert flights itself), at most 10 waiting.
--
-- Additive: nodes and webs of the previous release insert these rows as before.

CREATE FUNCTION record_skipped(
    p_job uuid,
    p_scope text,
    p_skips json,
    p_now timestamptz
) RETURNS TABLE (skipped_slot timestamptz)
LANGUAGE sql SECURITY DEFINER AS $$
    INSERT INTO runs (job_id, tenant_id, job_name, scheduled_for, attempt, status,
                      finished_at, last_error)
    SELECT j.id, j.tenant_id, j.name, (e->>0)::timestamptz, 1, 'skipped',
           coalesce(p_now, now()), e->>1
    FROM jobs j CROSS JOIN json_array_elements(p_skips) AS e
    WHERE j.id = p_job AND (p_scope IS NULL OR j.tenant_id = p_scope)
      AND j.status IN ('idle', 'paused')
      AND ((e->>0)::timestamptz >= j.slot_at OR (e->>0)::timestamptz > now()
           OR has_table_privilege(session_user, 'runs', 'INSERT'))
      AND nullif(e->>1, '') IS NOT NULL
    ON CONFLICT (job_id, scheduled_for) DO NOTHING
    RETURNING scheduled_for
$$;

CREATE FUNCTION trigger_flight(
    p_job uuid,
    p_scope text,
    p_payload jsonb,
    p_now timestamptz,
    p_most integer
) RETURNS TABLE (flight_slot timestamptz)
LANGUAGE sql SECURITY DEFINER AS $$
    INSERT INTO flights (job_id, slot, shard_id, status, attempt, due_at, lease_token, origin,
                         payload, revision)
    SELECT j.id, k.t, j.shard_id, 'queued', 1, k.t, j.lease_token, 'trigger', p_payload,
           j.revision
    FROM jobs j
    CROSS JOIN (SELECT CASE WHEN p_now IS NOT NULL
                             AND has_table_privilege(session_user, 'flights', 'INSERT')
                            THEN p_now ELSE now() END AS t) AS k
    WHERE j.id = p_job AND (p_scope IS NULL OR j.tenant_id = p_scope)
      AND (SELECT count(*) FROM flights f
           WHERE f.job_id = j.id AND f.origin = 'trigger' AND f.status = 'queued')
          < least(p_most, 10)
    ON CONFLICT (job_id, slot) DO NOTHING
    RETURNING slot
$$;

-- Definers' search_path: the schema, then pg_temp (never a caller's temporary table first).
DO $$
BEGIN
    EXECUTE format('ALTER FUNCTION record_skipped(uuid, text, json, timestamptz) '
                   'SET search_path = %I, pg_temp', current_schema());
    EXECUTE format('ALTER FUNCTION trigger_flight(uuid, text, jsonb, timestamptz, integer) '
                   'SET search_path = %I, pg_temp', current_schema());
END $$;
