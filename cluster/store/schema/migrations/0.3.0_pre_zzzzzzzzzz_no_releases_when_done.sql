-- Pulse schema, 0.3.0: a done chained job is released nothing.
--
-- A chained job done after its max_runs kept the slots released to it and not taken yet,
-- and every later success of its upstream released one more: rows the pruning pass never
-- takes (the job waits for them), a table growing for as long as the upstream runs. A
-- max_runs raised since then made the job idle, and it ran every one of them, the oldest
-- first, long after its upstream's success. Now chain_release releases nothing to a done
-- job, and a chained job that becomes done takes the slots still queued for it
-- (chain_done): owed nothing, as any done job's slots, and pruned with the taken ones. A
-- job given more runs again waits for its upstream's next success.
--
-- Additive: a node of the previous release releases as before; the trigger takes what it
-- leaves once the job is done.

CREATE OR REPLACE FUNCTION chain_release(upstream uuid, slot timestamptz,
                                         at timestamptz DEFAULT now()) RETURNS integer
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
DECLARE
    started integer := 0;
    s integer;
BEGIN
    INSERT INTO chain_slots (job_id, slot, created_at)
    SELECT e.downstream_id, slot, at FROM job_edges e JOIN jobs d ON d.id = e.downstream_id
    WHERE e.upstream_id = upstream AND e.match = 'chain' AND d.status <> 'done'
    ON CONFLICT DO NOTHING;
    IF NOT FOUND THEN
        RETURN 0;
    END IF;
    FOR s IN
        WITH waiting AS (
            SELECT d.id FROM jobs d
            WHERE d.id IN (SELECT e.downstream_id FROM job_edges e
                           WHERE e.upstream_id = upstream AND e.match = 'chain')
              AND d.status = 'idle' AND NOT d.gate_wait
              AND d.next_run_at = '9999-01-01Z'::timestamptz
            FOR UPDATE OF d SKIP LOCKED
        )
        UPDATE jobs j SET next_run_at = '9998-01-01Z'::timestamptz, updated_at = at
        FROM waiting w WHERE j.id = w.id
        RETURNING CASE WHEN j.next_run_at < '9999-01-01Z'::timestamptz THEN j.shard_id END
    LOOP
        IF s IS NOT NULL THEN
            started := started + 1;
            PERFORM pg_notify(current_schema() || '_wake', s::text);
        END IF;
    END LOOP;
    RETURN started;
END $$;

CREATE FUNCTION chain_done() RETURNS trigger
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
BEGIN
    UPDATE chain_slots c SET taken = true WHERE c.job_id = NEW.id AND NOT c.taken;
    RETURN NULL;
END $$;

CREATE TRIGGER jobs_chain_done AFTER UPDATE OF status ON jobs
FOR EACH ROW WHEN (NEW.status = 'done' AND OLD.status <> 'done'
                   AND starts_with(NEW.schedule, '@after:'))
EXECUTE FUNCTION chain_done();

-- A definer's search_path: the schema, then pg_temp (never a caller's temporary table first).
DO $$
BEGIN
    EXECUTE format('ALTER FUNCTION chain_release(uuid, timestamptz, timestamptz) '
                   'SET search_path = %I, pg_temp', current_schema());
    EXECUTE format('ALTER FUNCTION chain_done() SET search_path = %I, pg_temp',
                   current_schema());
END $$;
