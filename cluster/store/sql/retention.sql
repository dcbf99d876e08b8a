-- Pruning: expired runs, done one-off jobs, alert events, revisions and chain slots
-- (cluster/config/retention.py, cluster/store/housekeeping/pruning.py,
-- docs/design/retention.md).

-- name: prune_done_jobs
-- Deletes the done one-off jobs of the given shards that asked to be removed, or whose runs
-- retention has removed. Found through jobs_due: a done job's next_run_at is 9999-01-01.
DELETE FROM jobs j
WHERE j.id IN (
    SELECT d.id FROM unnest(%(shards)s::int[]) AS s(shard)
    CROSS JOIN LATERAL (
        SELECT x.id FROM jobs x
        WHERE x.shard_id = s.shard AND x.next_run_at >= '9999-01-01Z'::timestamptz
          AND x.status = 'done'
          AND (x.remove_when_done
               OR NOT EXISTS (SELECT 1 FROM runs r WHERE r.job_id = x.id))
        LIMIT %(batch)s
    ) AS d)
  AND j.status = 'done'
RETURNING j.id;

-- name: prune_setup
-- The pruning connection's settings: no JIT (over a page of jobs the cost estimate can
-- cross jit_above_cost, and compiling costs more than the statement), and no bitmap scans:
-- an index scan of a job's oldest runs stops at the batch and marks the entries of rows
-- deleted before as dead, a bitmap scan reads them all on every pass until a vacuum
-- (docs/design/retention.md).
SELECT set_config('jit', 'off', false), set_config('enable_bitmapscan', 'off', false);

-- name: prune_runs
-- Deletes up to %(batch)s expired runs of the next %(jobs)s jobs that have runs, by id from
-- %(from_id)s, of the given shards: runs older than their job's keep_for (failed, timed-out
-- and lost ones: the longer of that and keep_failed_for), or behind its newest keep_runs
-- (the rule of cluster/config/retention.py). The jobs are found by skipping through runs
-- (job_id, scheduled_for) one job at a time, so a job without runs costs nothing; then per
-- job two probes of that index, oldest first, never a scan of runs
-- (tests/integration/test_prune_plan.py). Never the row of a slot its job is running.
-- Deleted by ctid: a row a completion rewrote since this statement's snapshot has another
-- ctid in its new version, and stays.
WITH RECURSIVE ids AS (
    (SELECT r.job_id FROM runs r WHERE r.job_id >= %(from_id)s::uuid ORDER BY r.job_id LIMIT 1)
    UNION ALL
    SELECT (SELECT r.job_id FROM runs r WHERE r.job_id > i.job_id ORDER BY r.job_id LIMIT 1)
    FROM ids i WHERE i.job_id IS NOT NULL
),
page AS (
    SELECT i.job_id FROM ids i WHERE i.job_id IS NOT NULL LIMIT %(jobs)s
),
doomed AS (
    SELECT p.id AS job_id, d.ctid
    FROM (
        SELECT j.id, j.status, j.slot_at,
               least(coalesce(j.keep_for_s, %(keep_for_s)s), %(max_keep_s)s) AS keep_s,
               least(greatest(coalesce(j.keep_for_s, %(keep_for_s)s), %(keep_failed_for_s)s),
                     %(max_keep_s)s) AS keep_failed_s,
               coalesce(j.keep_runs, %(keep_runs)s) AS keep_runs
        FROM jobs j
        -- The ids as an index condition: read by primary key however many jobs there are.
        WHERE j.id = ANY(ARRAY(SELECT g.job_id FROM page g))
          AND j.shard_id = ANY(%(shards)s::int[])
        -- In id order, so the candidates are sorted job by job and the batch stops early.
        ORDER BY j.id
    ) AS p
    CROSS JOIN (SELECT coalesce(%(now)s::timestamptz, now()) AS t) AS k
    -- The job's keep_runs-th newest slot: every older run is over the count.
    LEFT JOIN LATERAL (
        SELECT x.scheduled_for AS t FROM runs x
        WHERE x.job_id = p.id
        ORDER BY x.scheduled_for DESC
        OFFSET p.keep_runs - 1
        LIMIT 1
    ) AS nth ON true
    CROSS JOIN LATERAL (
        SELECT r.ctid, r.scheduled_for FROM runs r
        WHERE r.job_id = p.id
          AND r.scheduled_for < greatest(k.t - make_interval(secs => p.keep_s), nth.t)
          AND (r.scheduled_for < nth.t
               OR r.scheduled_for < k.t - make_interval(secs => CASE
                      WHEN r.status IN ('failed', 'timed_out', 'lost') THEN p.keep_failed_s
                      ELSE p.keep_s END))
          AND r.status <> 'running'
          AND NOT (p.status = 'running' AND r.scheduled_for = p.slot_at)
        ORDER BY r.scheduled_for
        LIMIT %(batch)s
    ) AS d
    ORDER BY p.id, d.scheduled_for
    LIMIT %(batch)s
),
gone AS (
    DELETE FROM runs r
    WHERE r.ctid = ANY(ARRAY(SELECT ctid FROM doomed))
    RETURNING 1
)
SELECT (SELECT count(*) FROM gone)::int AS removed,
       (SELECT count(*) FROM doomed)::int AS chosen,
       (SELECT job_id FROM doomed ORDER BY job_id DESC LIMIT 1) AS resume_id,
       -- The page's last job; NULL when the page was not full (no job with runs after it).
       CASE WHEN (SELECT count(*) FROM page) >= %(jobs)s
            THEN (SELECT job_id FROM page ORDER BY job_id DESC LIMIT 1) END AS last_id;

-- name: count_prunable_runs
-- What prune_runs would delete from the same page of jobs, counted (`pulse runs prune
-- --dry-run`): the same conditions, kept in step by tests/integration/test_prune.py.
WITH RECURSIVE ids AS (
    (SELECT r.job_id FROM runs r WHERE r.job_id >= %(from_id)s::uuid ORDER BY r.job_id LIMIT 1)
    UNION ALL
    SELECT (SELECT r.job_id FROM runs r WHERE r.job_id > i.job_id ORDER BY r.job_id LIMIT 1)
    FROM ids i WHERE i.job_id IS NOT NULL
),
page AS (
    SELECT i.job_id FROM ids i WHERE i.job_id IS NOT NULL LIMIT %(jobs)s
)
SELECT (
    SELECT coalesce(sum(d.n), 0)
    FROM (
        SELECT j.id, j.status, j.slot_at,
               least(coalesce(j.keep_for_s, %(keep_for_s)s), %(max_keep_s)s) AS keep_s,
               least(greatest(coalesce(j.keep_for_s, %(keep_for_s)s), %(keep_failed_for_s)s),
                     %(max_keep_s)s) AS keep_failed_s,
               coalesce(j.keep_runs, %(keep_runs)s) AS keep_runs
        FROM jobs j
        WHERE j.id = ANY(ARRAY(SELECT g.job_id FROM page g))
          AND j.shard_id = ANY(%(shards)s::int[])
    ) AS p
    CROSS JOIN (SELECT coalesce(%(now)s::timestamptz, now()) AS t) AS k
    LEFT JOIN LATERAL (
        SELECT x.scheduled_for AS t FROM runs x
        WHERE x.job_id = p.id
        ORDER BY x.scheduled_for DESC
        OFFSET p.keep_runs - 1
        LIMIT 1
    ) AS nth ON true
    -- Counted per job, so each job's runs are read by its probe, never joined as a table.
    CROSS JOIN LATERAL (
        SELECT count(*) AS n FROM runs r
        WHERE r.job_id = p.id
          AND r.scheduled_for < greatest(k.t - make_interval(secs => p.keep_s), nth.t)
          AND (r.scheduled_for < nth.t
               OR r.scheduled_for < k.t - make_interval(secs => CASE
                      WHEN r.status IN ('failed', 'timed_out', 'lost') THEN p.keep_failed_s
                      ELSE p.keep_s END))
          AND r.status <> 'running'
          AND NOT (p.status = 'running' AND r.scheduled_for = p.slot_at)
    ) AS d
)::int AS chosen,
CASE WHEN (SELECT count(*) FROM page) >= %(jobs)s
     THEN (SELECT job_id FROM page ORDER BY job_id DESC LIMIT 1) END AS last_id;

-- name: prune_alert_events
-- Alert events older than keep_failed_for whose deliveries are all done (delivered or
-- given up; an event no rule wants any more has none), oldest first; their deliveries go
-- with them (ON DELETE CASCADE). Several nodes may run it at once: SKIP LOCKED.
WITH doomed AS (
    SELECT e.id FROM alert_events e
    WHERE e.created_at < coalesce(%(now)s::timestamptz, now()) - make_interval(secs => %(keep_s)s)
      AND NOT EXISTS (
          SELECT 1 FROM alert_deliveries d WHERE d.event_id = e.id AND d.status = 'pending')
    ORDER BY e.created_at
    LIMIT %(batch)s
    FOR UPDATE OF e SKIP LOCKED
),
gone AS (
    DELETE FROM alert_events e USING doomed d WHERE e.id = d.id RETURNING 1
)
SELECT count(*)::int AS removed FROM gone;

-- name: count_prunable_alert_events
SELECT count(*)::int AS chosen FROM alert_events e
WHERE e.created_at < coalesce(%(now)s::timestamptz, now()) - make_interval(secs => %(keep_s)s)
  AND NOT EXISTS (
      SELECT 1 FROM alert_deliveries d WHERE d.event_id = e.id AND d.status = 'pending');

-- name: runs_table_size
-- Postgres's estimate of the rows of runs (as of its last vacuum or analyze; NULL before
-- the first) and the bytes of the table with its indexes and TOAST.
SELECT CASE WHEN c.reltuples < 0 THEN NULL ELSE c.reltuples::float8 END AS rows,
       pg_total_relation_size(c.oid) AS bytes
FROM pg_class c WHERE c.oid = 'runs'::regclass;

-- name: prune_revisions
-- The revisions of job names whose last revision removed the job, once that removal is
-- older than keep_failed_for (the longest retention of runs): a job's revisions stay as
-- long as it exists (docs/retention.md). A name in use again keeps its whole history.
WITH doomed AS (
    SELECT r.tenant_id, r.job_name FROM job_revisions r
    WHERE r.change = 'removed'
      AND r.at < coalesce(%(now)s::timestamptz, now()) - make_interval(secs => %(keep_s)s)
      AND NOT EXISTS (SELECT 1 FROM jobs j
                      WHERE j.tenant_id = r.tenant_id AND j.name = r.job_name)
      AND NOT EXISTS (SELECT 1 FROM job_revisions l
                      WHERE l.tenant_id = r.tenant_id AND l.job_name = r.job_name
                        AND l.revision > r.revision)
    ORDER BY r.at
    LIMIT %(batch)s
),
gone AS (
    DELETE FROM job_revisions x USING doomed d
    WHERE x.tenant_id = d.tenant_id AND x.job_name = d.job_name
    RETURNING 1
)
SELECT count(*)::int AS removed, (SELECT count(*) FROM doomed)::int AS names FROM gone;

-- name: count_prunable_revisions
SELECT count(*)::int AS chosen FROM job_revisions x
WHERE EXISTS (
    SELECT 1 FROM job_revisions r
    WHERE r.tenant_id = x.tenant_id AND r.job_name = x.job_name AND r.change = 'removed'
      AND r.at < coalesce(%(now)s::timestamptz, now()) - make_interval(secs => %(keep_s)s)
      AND NOT EXISTS (SELECT 1 FROM jobs j
                      WHERE j.tenant_id = r.tenant_id AND j.name = r.job_name)
      AND NOT EXISTS (SELECT 1 FROM job_revisions l
                      WHERE l.tenant_id = r.tenant_id AND l.job_name = r.job_name
                        AND l.revision > r.revision));

-- name: prune_chain_slots
-- Chained jobs' slots (chain_slots) taken longer ago than keep_failed_for whose run
-- retention has removed, oldest first. A slot not taken yet is one its job still waits
-- for, and one the job holds (running, or waiting at its gate) is its current one: both
-- stay. A taken row is what makes a second release of its slot (a fan-in's other
-- upstream, a backfilled upstream slot) insert nothing, so it stays while its run is kept
-- (docs/design/chains.md). Probed by chain_slots_taken; several nodes: SKIP LOCKED.
WITH doomed AS (
    SELECT c.job_id, c.slot FROM chain_slots c
    WHERE c.taken
      AND c.created_at < coalesce(%(now)s::timestamptz, now()) - make_interval(secs => %(keep_s)s)
      AND NOT EXISTS (SELECT 1 FROM runs r WHERE r.job_id = c.job_id AND r.scheduled_for = c.slot)
      AND NOT EXISTS (SELECT 1 FROM jobs j WHERE j.id = c.job_id AND j.slot_at = c.slot)
    ORDER BY c.created_at
    LIMIT %(batch)s
    FOR UPDATE OF c SKIP LOCKED
),
gone AS (
    DELETE FROM chain_slots x USING doomed d
    WHERE x.job_id = d.job_id AND x.slot = d.slot
    RETURNING 1
)
SELECT count(*)::int AS removed FROM gone;

-- name: count_prunable_chain_slots
SELECT count(*)::int AS chosen FROM chain_slots c
WHERE c.taken
  AND c.created_at < coalesce(%(now)s::timestamptz, now()) - make_interval(secs => %(keep_s)s)
  AND NOT EXISTS (SELECT 1 FROM runs r WHERE r.job_id = c.job_id AND r.scheduled_for = c.slot)
  AND NOT EXISTS (SELECT 1 FROM jobs j WHERE j.id = c.job_id AND j.slot_at = c.slot);

-- name: prune_limit_waits
-- Waits for named limits (0.3.0_pre_uses_named_limits) that ended longer ago than
-- keep_failed_for (the longest retention of runs: `pulse audit` reads them with their
-- runs), oldest first, and the open waits of jobs removed since. Several nodes: SKIP LOCKED.
WITH doomed AS (
    SELECT w.ctid FROM limit_waits w
    WHERE w.ended < coalesce(%(now)s::timestamptz, now()) - make_interval(secs => %(keep_s)s)
    ORDER BY w.ended
    LIMIT %(batch)s
    FOR UPDATE OF w SKIP LOCKED
),
orphans AS (
    DELETE FROM limit_waits w
    WHERE w.ended IS NULL AND NOT EXISTS (SELECT 1 FROM jobs j WHERE j.id = w.job_id)
      AND w.since < coalesce(%(now)s::timestamptz, now()) - make_interval(secs => %(keep_s)s)
    RETURNING 1
),
gone AS (
    DELETE FROM limit_waits x USING doomed d WHERE x.ctid = d.ctid RETURNING 1
)
SELECT (SELECT count(*) FROM gone)::int + (SELECT count(*) FROM orphans)::int AS removed;
