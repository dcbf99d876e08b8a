-- Pulse schema, version 5. Runs with search_path set to the cluster's schema.
--
-- record_run writes the run row of an attempt that ended, for complete, release and
-- recover alike: one row per (job, slot), updated in place by a later attempt of the slot
-- (tests/integration/test_history.py). Additive: nodes of version 4 write their own rows.

CREATE FUNCTION record_run(
    run_job_id uuid,
    run_tenant_id text,
    run_job_name text,
    run_scheduled_for timestamptz,
    run_attempt integer,
    run_node_id text,
    run_zone text,
    run_status text,
    run_lease_token bigint,
    run_started_at timestamptz,
    run_finished_at timestamptz,
    run_duration_s double precision,
    run_last_error text
) RETURNS void
LANGUAGE sql SET search_path FROM CURRENT AS $$
    INSERT INTO runs AS r (job_id, tenant_id, job_name, scheduled_for, attempt, node_id, zone,
                           status, lease_token, started_at, finished_at, duration_s,
                           last_error)
    VALUES (run_job_id, run_tenant_id, run_job_name, run_scheduled_for, run_attempt,
            run_node_id, run_zone, run_status, run_lease_token, run_started_at,
            run_finished_at, run_duration_s, run_last_error)
    ON CONFLICT (job_id, scheduled_for) DO UPDATE SET
        attempt = excluded.attempt,
        node_id = excluded.node_id,
        zone = excluded.zone,
        status = excluded.status,
        lease_token = excluded.lease_token,
        started_at = excluded.started_at,
        finished_at = excluded.finished_at,
        duration_s = excluded.duration_s,
        last_error = excluded.last_error
$$;
