-- Pulse schema, 0.3.0: a tenant's quota caps how often its jobs run and what they keep.
--
-- A tenant-scoped token could write a job every second that keeps a megabyte of output per
-- run for ever. Four caps join the quota: the shortest period between two slots of a job
-- (checked by the writer, which reads the schedule, through tenant_min_period_s: the node
-- role cannot read quotas), the output a run keeps, and how long and how many runs a job
-- keeps (checked by quota_check_job, on insert and on an update of those columns). A cap
-- applies to what is written from then on. Additive: writers of the previous release are
-- checked by the trigger alike, and never call the new function.
ALTER TABLE tenant_quotas
    ADD COLUMN min_period_s     integer CHECK (min_period_s >= 1),
    ADD COLUMN max_output_limit integer CHECK (max_output_limit >= 0),
    ADD COLUMN max_keep_for_s   integer CHECK (max_keep_for_s >= 1),
    ADD COLUMN max_keep_runs    integer CHECK (max_keep_runs >= 1);

-- The shortest period a tenant's jobs may have (NULL: no cap), for every writer's role.
CREATE FUNCTION tenant_min_period_s(tenant text) RETURNS integer
LANGUAGE sql STABLE SECURITY DEFINER AS $$
    SELECT q.min_period_s FROM tenant_quotas q WHERE q.tenant_id = tenant
$$;

CREATE OR REPLACE FUNCTION quota_check_job() RETURNS trigger
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
    -- What a job keeps: checked when written, so an update of another column passes.
    IF (TG_OP = 'INSERT' OR NEW.output_limit IS DISTINCT FROM OLD.output_limit)
       AND NEW.output_limit > q.max_output_limit THEN
        RAISE EXCEPTION 'tenant % may keep at most % bytes of a run''s output '
            '(max_output_limit), not %', quote_literal(NEW.tenant_id), q.max_output_limit,
            NEW.output_limit
            USING ERRCODE = 'check_violation', CONSTRAINT = 'tenant_quota',
                  COLUMN = 'output_limit';
    END IF;
    IF (TG_OP = 'INSERT' OR NEW.keep_for_s IS DISTINCT FROM OLD.keep_for_s)
       AND NEW.keep_for_s > q.max_keep_for_s THEN
        RAISE EXCEPTION 'tenant % may keep runs at most %s (max_keep_for_s), not %s',
            quote_literal(NEW.tenant_id), q.max_keep_for_s, NEW.keep_for_s
            USING ERRCODE = 'check_violation', CONSTRAINT = 'tenant_quota',
                  COLUMN = 'keep_for';
    END IF;
    IF (TG_OP = 'INSERT' OR NEW.keep_runs IS DISTINCT FROM OLD.keep_runs)
       AND NEW.keep_runs > q.max_keep_runs THEN
        RAISE EXCEPTION 'tenant % may keep at most % runs of a job (max_keep_runs), not %',
            quote_literal(NEW.tenant_id), q.max_keep_runs, NEW.keep_runs
            USING ERRCODE = 'check_violation', CONSTRAINT = 'tenant_quota',
                  COLUMN = 'keep_runs';
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

CREATE TRIGGER tenant_quota_kept BEFORE UPDATE OF output_limit, keep_for_s, keep_runs ON jobs
FOR EACH ROW WHEN (NEW.parent_id IS NULL) EXECUTE FUNCTION quota_check_job();

DO $$
BEGIN
    EXECUTE format('ALTER FUNCTION quota_check_job() SET search_path = %I, pg_temp',
                   current_schema());
    EXECUTE format('ALTER FUNCTION tenant_min_period_s(text) SET search_path = %I, pg_temp',
                   current_schema());
END $$;
