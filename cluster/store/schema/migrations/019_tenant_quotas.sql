-- Pulse schema, version 19: tenants' quotas, and least-privilege roles
-- (cluster/store/quotas.py, cluster/store/roles.py, docs/design/roles.md).
--
-- A quota caps what a tenant may ask for: its jobs (each-zone children aside), its
-- backfill slots requested and not yet run, and the slots a job or backfill may run at
-- once. No row, or a NULL cap: no cap, so existing clusters keep working. The checks are
-- triggers, so every path that writes (the API, the CLI, the Python API, --sync-jobs)
-- meets them; each locks the tenant's quota row first, so two writers racing for the last
-- place queue there and the second counts the first's row.
--
-- The check functions and the trigger that forgets a deleted job's runs are SECURITY
-- DEFINER: they run as the schema's owner, so a role that may write jobs (pulse_web) needs
-- no right on runs or on the quotas' locks. Their search_path is fixed, pg_temp last.
-- Additive: nodes of the previous release never read tenant_quotas.

CREATE TABLE tenant_quotas (
    tenant_id          text PRIMARY KEY CHECK (tenant_id <> ''),
    max_jobs           integer CHECK (max_jobs >= 0),
    max_backfill_slots integer CHECK (max_backfill_slots >= 0),
    max_parallel       integer CHECK (max_parallel >= 1),
    updated_at         timestamptz NOT NULL DEFAULT now()
);

CREATE FUNCTION quota_check_job() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER AS $$
DECLARE
    q tenant_quotas;
    used bigint;
BEGIN
    -- Only an insert counts, so only an insert queues on the quota row.
    IF TG_OP = 'INSERT' THEN
        SELECT * INTO q FROM tenant_quotas WHERE tenant_id = NEW.tenant_id FOR UPDATE;
    ELSE
        SELECT * INTO q FROM tenant_quotas WHERE tenant_id = NEW.tenant_id;
    END IF;
    IF NOT FOUND THEN
        RETURN NEW;
    END IF;
    IF NEW.overlap = 'allow' AND NEW.max_concurrent > q.max_parallel THEN
        RAISE EXCEPTION 'tenant % may run at most % slots of a job at once (max_parallel), '
            'not %', quote_literal(NEW.tenant_id), q.max_parallel, NEW.max_concurrent
            USING ERRCODE = 'check_violation', CONSTRAINT = 'tenant_quota',
                  COLUMN = 'max_concurrent';
    END IF;
    -- An upsert of a job that exists (ON CONFLICT DO UPDATE) fires this too: no new job.
    IF TG_OP = 'INSERT' AND q.max_jobs IS NOT NULL AND NOT EXISTS (
        SELECT 1 FROM jobs j WHERE j.tenant_id = NEW.tenant_id AND j.name = NEW.name
    ) THEN
        SELECT count(*) INTO used FROM jobs j
        WHERE j.tenant_id = NEW.tenant_id AND j.parent_id IS NULL;
        IF used >= q.max_jobs THEN
            RAISE EXCEPTION 'tenant % has % jobs, its cap (max_jobs %)',
                quote_literal(NEW.tenant_id), used, q.max_jobs
                USING ERRCODE = 'check_violation', CONSTRAINT = 'tenant_quota',
                      COLUMN = 'max_jobs';
        END IF;
    END IF;
    RETURN NEW;
END $$;

CREATE FUNCTION quota_check_backfill() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER AS $$
DECLARE
    q tenant_quotas;
    used bigint;
BEGIN
    SELECT * INTO q FROM tenant_quotas WHERE tenant_id = NEW.tenant_id FOR UPDATE;
    IF NOT FOUND THEN
        RETURN NEW;
    END IF;
    IF NEW.max_parallel > q.max_parallel THEN
        RAISE EXCEPTION 'tenant % may run at most % slots of a backfill at once '
            '(max_parallel), not %', quote_literal(NEW.tenant_id), q.max_parallel,
            NEW.max_parallel
            USING ERRCODE = 'check_violation', CONSTRAINT = 'tenant_quota',
                  COLUMN = 'max_parallel';
    END IF;
    IF q.max_backfill_slots IS NOT NULL THEN
        -- Requested and not yet run: the slots not queued yet, and those in flight.
        SELECT coalesce(sum(greatest(b.slots_total - b.slots_queued, 0)
                            + (SELECT count(*) FROM flights f WHERE f.backfill_id = b.id)), 0)
        INTO used
        FROM backfills b WHERE b.tenant_id = NEW.tenant_id AND b.status = 'active';
        IF used + NEW.slots_total > q.max_backfill_slots THEN
            RAISE EXCEPTION 'tenant % has % backfill slots pending; % more would pass its '
                'cap (max_backfill_slots %)', quote_literal(NEW.tenant_id), used,
                NEW.slots_total, q.max_backfill_slots
                USING ERRCODE = 'check_violation', CONSTRAINT = 'tenant_quota',
                      COLUMN = 'max_backfill_slots';
        END IF;
    END IF;
    RETURN NEW;
END $$;

CREATE TRIGGER tenant_quota BEFORE INSERT ON jobs
FOR EACH ROW WHEN (NEW.parent_id IS NULL) EXECUTE FUNCTION quota_check_job();
CREATE TRIGGER tenant_quota_update BEFORE UPDATE OF overlap, max_concurrent ON jobs
FOR EACH ROW WHEN (NEW.overlap = 'allow' AND NEW.parent_id IS NULL)
EXECUTE FUNCTION quota_check_job();
CREATE TRIGGER tenant_quota BEFORE INSERT ON backfills
FOR EACH ROW EXECUTE FUNCTION quota_check_backfill();

ALTER FUNCTION forget_deleted_jobs_runs() SECURITY DEFINER;

DO $$
BEGIN
    EXECUTE format('ALTER FUNCTION quota_check_job() SET search_path = %I, pg_temp',
                   current_schema());
    EXECUTE format('ALTER FUNCTION quota_check_backfill() SET search_path = %I, pg_temp',
                   current_schema());
    EXECUTE format('ALTER FUNCTION forget_deleted_jobs_runs() SET search_path = %I, pg_temp',
                   current_schema());
END $$;
