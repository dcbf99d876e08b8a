-- Named limits shared across jobs (0.3.0_pre_uses_named_limits,
-- cluster/store/jobstore/named_limits.py, docs/design/limits.md). A key's scope is '' for a
-- cluster-wide key, else the tenant whose own key it is.

-- name: limit_set
-- A key with exactly the limits given (a NULL one is lifted). Waits for a claim holding the
-- key's row this instant, as a claim never waits for it (limit_take skips a locked row).
INSERT INTO limit_keys AS l (scope, name, max_concurrent, rate, per_s)
VALUES (%(key_scope)s, %(name)s, %(max_concurrent)s, %(rate)s, %(per_s)s)
ON CONFLICT (scope, name) DO UPDATE SET
    max_concurrent = excluded.max_concurrent, rate = excluded.rate, per_s = excluded.per_s,
    updated_at = now()
RETURNING l.id;

-- name: limit_lock
-- The key's row, locked: a job being written that names it holds it FOR KEY SHARE
-- (uses_check), so a removal waits for that write and then sees its job.
SELECT l.id FROM limit_keys l
WHERE l.scope = %(key_scope)s AND l.name = %(name)s
FOR UPDATE;

-- name: limit_users
-- Who uses the key: the jobs whose `uses` resolve to it, and any job or flight holding it
-- or bound to take it. The first few by name, with their count.
WITH k AS (
    SELECT l.id, l.scope, l.name FROM limit_keys l
    WHERE l.scope = %(key_scope)s AND l.name = %(name)s
),
users AS (
    SELECT j.tenant_id, j.name FROM jobs j CROSS JOIN k
    WHERE j.uses @> ARRAY[k.name]
      AND (j.tenant_id = k.scope
           OR (k.scope = '' AND NOT EXISTS (
               SELECT 1 FROM limit_keys o WHERE o.scope = j.tenant_id AND o.name = k.name)))
    UNION
    SELECT j.tenant_id, j.name FROM jobs j CROSS JOIN k WHERE j.holds @> ARRAY[k.id]
    UNION
    SELECT j.tenant_id, j.name FROM flights f JOIN jobs j ON j.id = f.job_id CROSS JOIN k
    WHERE f.uses_keys @> ARRAY[k.id] OR f.holds @> ARRAY[k.id]
)
SELECT count(*) OVER () AS total, u.tenant_id, u.name FROM users u
ORDER BY u.tenant_id, u.name
LIMIT 3;

-- name: limit_remove
WITH gone AS (
    DELETE FROM limit_keys l WHERE l.scope = %(key_scope)s AND l.name = %(name)s
    RETURNING l.id
),
moves AS (
    DELETE FROM limit_moves m WHERE m.key_id IN (SELECT id FROM gone)
)
SELECT id FROM gone;

-- name: limit_keys_list
-- Every key (%(tenant_id)s: the cluster-wide ones and that tenant's own, and of their holders
-- and waiters that tenant's alone), with its runs in flight, the runs holding it and the
-- slots waiting for it.
SELECT l.id, nullif(l.scope, '') AS tenant, l.name, l.max_concurrent, l.rate, l.per_s,
       r.running, l.updated_at,
       coalesce((
           SELECT jsonb_agg(jsonb_build_object('tenant', h.tenant_id, 'job', h.name,
                                               'slot', h.slot, 'node', h.node)
                            ORDER BY h.slot, h.tenant_id, h.name)
           FROM (SELECT j.tenant_id, j.name, j.slot_at AS slot, j.locked_by AS node
                 FROM jobs j WHERE j.holds @> ARRAY[l.id] AND j.status = 'running'
                 UNION ALL
                 SELECT j.tenant_id, j.name, f.slot, f.locked_by FROM flights f
                 JOIN jobs j ON j.id = f.job_id
                 WHERE f.holds @> ARRAY[l.id] AND f.status = 'running') AS h
           WHERE %(tenant_id)s::text IS NULL OR h.tenant_id = %(tenant_id)s), '[]')
           AS holders,
       coalesce((
           SELECT jsonb_agg(jsonb_build_object('tenant', j.tenant_id, 'job', j.name,
                                               'slot', w.slot, 'since', w.since)
                            ORDER BY w.since, j.tenant_id, j.name)
           FROM limit_waits w JOIN jobs j ON j.id = w.job_id
           WHERE w.key_name = l.name AND w.ended IS NULL
             AND (j.tenant_id = l.scope OR l.scope = '')
             AND (%(tenant_id)s::text IS NULL OR j.tenant_id = %(tenant_id)s)), '[]')
           AS waiters
FROM limit_keys l JOIN limit_room r ON r.id = l.id
WHERE %(tenant_id)s::text IS NULL OR l.scope IN ('', %(tenant_id)s)
ORDER BY l.name, l.scope;

-- name: limit_waiting
-- The key a job's slot waits for now, if any: its open wait for its current slot (or a
-- queued flight's), while the slot is still due and not running.
SELECT w.key_name, w.slot, w.since FROM limit_waits w
JOIN jobs j ON j.id = w.job_id
WHERE w.job_id = %(job_id)s AND w.ended IS NULL
  AND ((w.slot = j.slot_at AND j.status = 'idle')
       OR EXISTS (SELECT 1 FROM flights f
                  WHERE f.job_id = w.job_id AND f.slot = w.slot AND f.status = 'queued'))
ORDER BY w.since
LIMIT 1;
