-- Tenants' limits on runs at once across the cluster (migration 014,
-- cluster/store/jobstore/tenant_limits.py, docs/design/fairness.md).

-- name: tenant_limit_lock
-- Setting or clearing a tenant's limit marks its rows under this lock; inserts of its jobs
-- and flights wait for it (migration 014).
SELECT pg_advisory_xact_lock(tenant_lock_key(%(tenant_id)s));

-- name: tenant_limit_upsert
-- The tenant's limit, its row locked for the rest of the transaction: no claim takes one of
-- its places meanwhile (tenant_take skips a locked row).
INSERT INTO tenant_limits AS l (tenant_id, max_concurrent) VALUES (%(tenant_id)s, %(max)s)
ON CONFLICT (tenant_id) DO UPDATE SET max_concurrent = excluded.max_concurrent,
    updated_at = now();

-- name: tenant_mark
-- Marks (or unmarks) the tenant's jobs and flights for the place triggers of migration 014.
WITH marked AS (
    UPDATE jobs j SET limited = %(limited)s
    WHERE j.tenant_id = %(tenant_id)s AND j.limited <> %(limited)s
)
UPDATE flights f SET limit_tenant = CASE WHEN %(limited)s THEN j.tenant_id END
FROM jobs j
WHERE j.id = f.job_id AND j.tenant_id = %(tenant_id)s
  AND f.limit_tenant IS DISTINCT FROM (CASE WHEN %(limited)s THEN j.tenant_id END);

-- name: tenant_recount
-- The places in use, counted from the rows themselves, the journal as of the same snapshot
-- folded away: exact, as the caller holds the limits row and every row of the tenant.
WITH gone AS (
    DELETE FROM tenant_moves m WHERE m.tenant_id = %(tenant_id)s
)
UPDATE tenant_limits l SET taken =
    (SELECT count(*) FROM jobs j
     WHERE j.tenant_id = l.tenant_id AND j.status = 'running' AND j.limited)
  + (SELECT count(*) FROM flights f
     WHERE f.limit_tenant = l.tenant_id AND f.status = 'running')
WHERE l.tenant_id = %(tenant_id)s
RETURNING l.tenant_id, l.max_concurrent, l.taken AS running, l.updated_at;

-- name: tenant_limit_remove
WITH gone AS (
    DELETE FROM tenant_moves m WHERE m.tenant_id = %(tenant_id)s
)
DELETE FROM tenant_limits l WHERE l.tenant_id = %(tenant_id)s
RETURNING l.tenant_id;

-- name: tenant_limits
-- Every limit with the places in use now (max - room).
SELECT l.tenant_id, l.max_concurrent, l.max_concurrent - r.room AS running, l.updated_at
FROM tenant_limits l JOIN tenant_room r USING (tenant_id)
WHERE %(tenant_id)s::text IS NULL OR l.tenant_id = %(tenant_id)s
ORDER BY l.tenant_id;

-- name: quota_set
-- Sets the caps named in %(changes)s (a JSON object: a number sets one, null lifts it) and
-- keeps the others; a row left with no cap goes.
WITH given AS (
    SELECT %(changes)s::jsonb AS c
),
merged AS (
    INSERT INTO tenant_quotas AS q (tenant_id, max_jobs, max_backfill_slots, max_parallel,
                                    min_period_s, max_output_limit, max_keep_for_s,
                                    max_keep_runs)
    SELECT %(tenant_id)s, (g.c ->> 'max_jobs')::int, (g.c ->> 'max_backfill_slots')::int,
           (g.c ->> 'max_parallel')::int, (g.c ->> 'min_period_s')::int,
           (g.c ->> 'max_output_limit')::int, (g.c ->> 'max_keep_for_s')::int,
           (g.c ->> 'max_keep_runs')::int
    FROM given g
    ON CONFLICT (tenant_id) DO UPDATE SET
        max_jobs = CASE WHEN (SELECT c ? 'max_jobs' FROM given)
                        THEN excluded.max_jobs ELSE q.max_jobs END,
        max_backfill_slots = CASE WHEN (SELECT c ? 'max_backfill_slots' FROM given)
                                  THEN excluded.max_backfill_slots ELSE q.max_backfill_slots END,
        max_parallel = CASE WHEN (SELECT c ? 'max_parallel' FROM given)
                            THEN excluded.max_parallel ELSE q.max_parallel END,
        min_period_s = CASE WHEN (SELECT c ? 'min_period_s' FROM given)
                            THEN excluded.min_period_s ELSE q.min_period_s END,
        max_output_limit = CASE WHEN (SELECT c ? 'max_output_limit' FROM given)
                                THEN excluded.max_output_limit ELSE q.max_output_limit END,
        max_keep_for_s = CASE WHEN (SELECT c ? 'max_keep_for_s' FROM given)
                              THEN excluded.max_keep_for_s ELSE q.max_keep_for_s END,
        max_keep_runs = CASE WHEN (SELECT c ? 'max_keep_runs' FROM given)
                             THEN excluded.max_keep_runs ELSE q.max_keep_runs END,
        updated_at = now()
    RETURNING q.*
)
SELECT m.*,
       (SELECT count(*) FROM jobs j
        WHERE j.tenant_id = m.tenant_id AND j.parent_id IS NULL)::int AS jobs
FROM merged m;

-- name: quota_prune
DELETE FROM tenant_quotas
WHERE tenant_id = %(tenant_id)s
  AND max_jobs IS NULL AND max_backfill_slots IS NULL AND max_parallel IS NULL
  AND min_period_s IS NULL AND max_output_limit IS NULL AND max_keep_for_s IS NULL
  AND max_keep_runs IS NULL
RETURNING tenant_id;

-- name: tenant_min_periods
-- The shortest period each tenant's jobs may have (quotas are not the node role's to read).
SELECT t AS tenant_id, tenant_min_period_s(t) AS min_period_s
FROM unnest(%(tenant_ids)s::text[]) AS t;

-- name: quota_remove
DELETE FROM tenant_quotas WHERE tenant_id = %(tenant_id)s RETURNING tenant_id;

-- name: tenant_quotas
-- Every quota, with the tenant's jobs now.
SELECT q.*,
       (SELECT count(*) FROM jobs j
        WHERE j.tenant_id = q.tenant_id AND j.parent_id IS NULL)::int AS jobs
FROM tenant_quotas q
WHERE %(tenant_id)s::text IS NULL OR q.tenant_id = %(tenant_id)s
ORDER BY q.tenant_id;
