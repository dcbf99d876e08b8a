-- The two record_run overloads without the slot's origin, as migrations 005 and 007 made
-- them. Migrations 015 and 016 dropped them while nodes of main from before 016 still
-- called them (completions, releases and recovery of lost attempts), so such a node running
-- across `pulse init` lost every slot it ended. Applied in the transaction of 015 and 016,
-- this leaves no moment without them. Nothing of this release calls them: a
-- post-migration drops them once no node older than 0.2.0 can run.

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
    run_last_error text,
    run_output jsonb
) RETURNS void
LANGUAGE sql SET search_path FROM CURRENT AS $$
    INSERT INTO runs AS r (job_id, tenant_id, job_name, scheduled_for, attempt, node_id, zone,
                           status, lease_token, started_at, finished_at, duration_s,
                           last_error, output)
    VALUES (run_job_id, run_tenant_id, run_job_name, run_scheduled_for, run_attempt,
            run_node_id, run_zone, run_status, run_lease_token, run_started_at,
            run_finished_at, run_duration_s, run_last_error, run_output)
    ON CONFLICT (job_id, scheduled_for) DO UPDATE SET
        attempt = excluded.attempt,
        node_id = excluded.node_id,
        zone = excluded.zone,
        status = excluded.status,
        lease_token = excluded.lease_token,
        started_at = excluded.started_at,
        finished_at = excluded.finished_at,
        duration_s = excluded.duration_s,
        last_error = excluded.last_error,
        output = excluded.output
$$;
