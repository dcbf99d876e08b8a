-- The run history as read: a job's runs, one run, the console's runs page and fire-lag
-- chart (cluster/store/jobstore/store.py, pages.py). Runs are written by claim.sql, completion.sql
-- and flights.sql, through record_run (migration 005).

-- name: list_runs
-- Run history, newest slot first: the rows of runs, and as 'running' the attempts in flight
-- read from their job rows, each in place of its slot's row if an earlier attempt left one
-- (keeping its id and last error; else the id is NULL). tests/integration/test_history.py.
WITH live AS (
    SELECT r.id, j.id AS job_id, j.tenant_id, j.name AS job_name, j.slot_at AS scheduled_for,
           j.attempt, j.locked_by AS node_id, j.locked_zone AS zone, 'running'::text AS status,
           j.lease_token, j.locked_at AS started_at, NULL::timestamptz AS finished_at,
           NULL::float8 AS duration_s, r.last_error,
           coalesce(j.slot_origin, 'schedule') AS origin, j.run_revision AS revision
    FROM jobs j
    LEFT JOIN runs r ON r.job_id = j.id AND r.scheduled_for = j.slot_at
    WHERE j.status = 'running' AND j.overlap <> 'allow'  -- its slots: the flights below
      AND (%(job_name)s::text IS NULL OR j.name = %(job_name)s)
      AND (%(tenant_id)s::text IS NULL OR j.tenant_id = %(tenant_id)s)
    UNION ALL
    -- Flights of overlap `allow` jobs (migration 009).
    SELECT r.id, j.id, j.tenant_id, j.name, f.slot, f.attempt, f.locked_by, f.locked_zone,
           'running'::text, f.lease_token, f.locked_at, NULL::timestamptz, NULL::float8,
           r.last_error, coalesce(f.origin, 'schedule'), f.revision
    FROM flights f
    JOIN jobs j ON j.id = f.job_id
    LEFT JOIN runs r ON r.job_id = f.job_id AND r.scheduled_for = f.slot
    WHERE f.status = 'running'
      AND (%(job_name)s::text IS NULL OR j.name = %(job_name)s)
      AND (%(tenant_id)s::text IS NULL OR j.tenant_id = %(tenant_id)s)
    UNION ALL
    -- Open slots of each-node jobs (migration `0.3.0_pre_zones_each_node`), with their
    -- coverage so far as the error ("1/3, node n2 running, node n3 running").
    SELECT NULL::bigint, j.id, j.tenant_id, j.name, s.slot, 1, NULL::text, NULL::text,
           'running'::text, NULL::bigint, s.opened_at, NULL::timestamptz, NULL::float8,
           node_slot_summary(s.members, s.ended), coalesce(s.origin, 'schedule'), s.revision
    FROM node_slots s
    JOIN jobs j ON j.id = s.job_id
    WHERE (%(job_name)s::text IS NULL OR j.name = %(job_name)s)
      AND (%(tenant_id)s::text IS NULL OR j.tenant_id = %(tenant_id)s)
)
SELECT x.* FROM (
    (SELECT l.* FROM live l
     WHERE (%(status)s::text IS NULL OR %(status)s = 'running')
     ORDER BY l.scheduled_for DESC, l.id DESC
     LIMIT %(limit)s)
    UNION ALL
    -- Ordered and limited on its own, so it walks an index of runs instead of sorting it.
    (SELECT r.id, r.job_id, r.tenant_id, r.job_name, r.scheduled_for, r.attempt, r.node_id,
            r.zone, r.status, r.lease_token, r.started_at, r.finished_at, r.duration_s,
            r.last_error, coalesce(r.origin, 'schedule'), r.revision
     FROM runs r
     WHERE (%(job_name)s::text IS NULL OR r.job_name = %(job_name)s)
       AND (%(tenant_id)s::text IS NULL OR r.tenant_id = %(tenant_id)s)
       AND (%(status)s::text IS NULL OR r.status = %(status)s)
       AND r.id NOT IN (SELECT l.id FROM live l WHERE l.id IS NOT NULL)
     ORDER BY r.scheduled_for DESC, r.id DESC
     LIMIT %(limit)s)
) AS x
ORDER BY x.scheduled_for DESC, x.id DESC
LIMIT %(limit)s;

-- name: recorded_slots
-- The job's slots from %(from)s on that have a record already (skip-next writes them ahead
-- of time), oldest first, on UNIQUE (job_id, scheduled_for): a slot planned again must
-- pass them (cluster/store/jobstore/holds.py).
SELECT scheduled_for, status, last_error FROM runs
WHERE job_id = %(job_id)s AND scheduled_for >= %(from)s
ORDER BY scheduled_for
LIMIT %(limit)s;

-- name: jobs_recorded_from
-- Of the jobs %(ids)s[i], those with a record at or after %(froms)s[i]: the few whose
-- planned slot `open_run` must move past records (an apply asks once for all its jobs).
SELECT k.id FROM unnest(%(ids)s::uuid[], %(froms)s::timestamptz[]) AS k(id, from_at)
WHERE EXISTS (SELECT 1 FROM runs r WHERE r.job_id = k.id AND r.scheduled_for >= k.from_at);

-- name: recorded_between
-- What was recorded for the job's slots in [%(from)s, %(to)s], oldest first, on UNIQUE
-- (job_id, scheduled_for): `pulse jobs show --explain` puts each beside its slot.
SELECT scheduled_for, status, last_error, attempt, origin FROM runs
WHERE job_id = %(job_id)s AND scheduled_for >= %(from)s AND scheduled_for <= %(to)s
ORDER BY scheduled_for
LIMIT %(limit)s;

-- name: show_run
-- One run of a job with its output: the given slot's, else the newest. An attempt in flight
-- is read from the job row as in list_runs, without output (written when it ends). Runs
-- are found by job id, on UNIQUE (job_id, scheduled_for) (tests/integration/test_run_output.py).
WITH job AS (
    SELECT j.* FROM jobs j WHERE j.tenant_id = %(tenant_id)s AND j.name = %(job_name)s
        AND (%(scope)s::text IS NULL OR j.tenant_id = %(scope)s)
)
SELECT x.* FROM (
    SELECT r.id, j.id AS job_id, j.tenant_id, j.name AS job_name, j.slot_at AS scheduled_for,
           j.attempt, j.locked_by AS node_id, j.locked_zone AS zone, 'running'::text AS status,
           j.lease_token, j.locked_at AS started_at, NULL::timestamptz AS finished_at,
           NULL::float8 AS duration_s, r.last_error, NULL::jsonb AS output,
           j.run_revision AS revision, 0 AS settled
    FROM job j
    LEFT JOIN runs r ON r.job_id = j.id AND r.scheduled_for = j.slot_at
    WHERE j.status = 'running'
      AND (%(slot)s::timestamptz IS NULL OR j.slot_at = %(slot)s::timestamptz)
    UNION ALL
    (SELECT r.id, r.job_id, r.tenant_id, r.job_name, r.scheduled_for, r.attempt, r.node_id,
            r.zone, r.status, r.lease_token, r.started_at, r.finished_at, r.duration_s,
            r.last_error, r.output, r.revision, 1
     FROM job j JOIN runs r ON r.job_id = j.id
     WHERE (%(slot)s::timestamptz IS NULL OR r.scheduled_for = %(slot)s::timestamptz)
     ORDER BY r.scheduled_for DESC
     LIMIT 1)
) AS x
ORDER BY x.scheduled_for DESC, x.settled
LIMIT 1;

-- name: runs_page
-- One page of the run history, newest slot first, before the cursor (slot, id): run rows,
-- and the attempts in flight as 'running' (as list_runs reads them). Those are found as
-- recovery finds them, by a probe of the due index per shard (a running job was due by its
-- claim), not by reading every job (bench/web.py). The page is one row, as jobs_page's: its
-- runs as one JSON array (each as Run.to_json shows it, cluster/jobs/sqljson.py), how many,
-- and the last run's (slot, id) for the next cursor.
WITH live AS (
    SELECT r.id, j.id AS job_id, j.tenant_id, j.name AS job_name, j.slot_at AS scheduled_for,
           j.attempt, j.locked_by AS node_id, j.locked_zone AS zone, 'running'::text AS status,
           j.locked_at AS started_at, NULL::timestamptz AS finished_at,
           NULL::float8 AS duration_s, r.last_error,
           coalesce(j.slot_origin, 'schedule') AS origin, j.run_revision AS revision
    FROM generate_series(0, (SELECT value::int - 1 FROM meta WHERE key = 'shard_count'))
        AS s(shard)
    -- OFFSET 0 keeps the probe per shard: flattened, the planner reads every job instead.
    CROSS JOIN LATERAL (
        SELECT j.* FROM jobs j
        WHERE j.shard_id = s.shard AND j.next_run_at <= now() + interval '1 minute'
          AND j.status = 'running' AND j.overlap <> 'allow'  -- its slots: the flights below
          AND (%(scope)s::text IS NULL OR j.tenant_id = %(scope)s)
          AND (%(job_name)s::text IS NULL OR j.name = %(job_name)s)
          AND (%(tenant_id)s::text IS NULL OR j.tenant_id = %(tenant_id)s)
        OFFSET 0
    ) AS j
    LEFT JOIN runs r ON r.job_id = j.id AND r.scheduled_for = j.slot_at
    UNION ALL
    -- Flights of overlap `allow` jobs (migration 009): few, read whole.
    SELECT r.id, j.id, j.tenant_id, j.name, f.slot, f.attempt, f.locked_by, f.locked_zone,
           'running'::text, f.locked_at, NULL::timestamptz, NULL::float8, r.last_error,
           coalesce(f.origin, 'schedule'), f.revision
    FROM flights f
    JOIN jobs j ON j.id = f.job_id
    LEFT JOIN runs r ON r.job_id = f.job_id AND r.scheduled_for = f.slot
    WHERE f.status = 'running'
      AND (%(scope)s::text IS NULL OR j.tenant_id = %(scope)s)
      AND (%(job_name)s::text IS NULL OR j.name = %(job_name)s)
      AND (%(tenant_id)s::text IS NULL OR j.tenant_id = %(tenant_id)s)
    UNION ALL
    -- Open slots of each-node jobs, as list_runs lists them (their coverage so far as the
    -- error).
    SELECT NULL::bigint, j.id, j.tenant_id, j.name, s.slot, 1, NULL::text, NULL::text,
           'running'::text, s.opened_at, NULL::timestamptz, NULL::float8,
           node_slot_summary(s.members, s.ended), coalesce(s.origin, 'schedule'), s.revision
    FROM node_slots s
    JOIN jobs j ON j.id = s.job_id
    WHERE (%(scope)s::text IS NULL OR j.tenant_id = %(scope)s)
      AND (%(job_name)s::text IS NULL OR j.name = %(job_name)s)
      AND (%(tenant_id)s::text IS NULL OR j.tenant_id = %(tenant_id)s)
), page AS (
SELECT x.* FROM (
    (SELECT l.* FROM live l
     WHERE (%(status)s::text IS NULL OR %(status)s = 'running')
       AND (%(since)s::timestamptz IS NULL OR l.scheduled_for >= %(since)s)
       AND (%(before_at)s::timestamptz IS NULL
            OR (l.scheduled_for, coalesce(l.id, 0)) < (%(before_at)s, %(before_id)s::bigint))
     ORDER BY l.scheduled_for DESC, l.id DESC
     LIMIT %(limit)s)
    UNION ALL
    (SELECT r.id, r.job_id, r.tenant_id, r.job_name, r.scheduled_for, r.attempt, r.node_id,
            r.zone, r.status, r.started_at, r.finished_at, r.duration_s, r.last_error,
            coalesce(r.origin, 'schedule'), r.revision
     FROM runs r
     WHERE (%(scope)s::text IS NULL OR r.tenant_id = %(scope)s)
       AND (%(job_name)s::text IS NULL OR r.job_name = %(job_name)s)
       -- One job's runs by UNIQUE (job_id, scheduled_for), not by scanning runs_recent.
       AND (%(job_name)s::text IS NULL OR %(tenant_id)s::text IS NULL OR r.job_id = (
            SELECT id FROM jobs WHERE tenant_id = %(tenant_id)s AND name = %(job_name)s))
       AND (%(tenant_id)s::text IS NULL OR r.tenant_id = %(tenant_id)s)
       AND (%(status)s::text IS NULL OR r.status = %(status)s)
       AND (%(since)s::timestamptz IS NULL OR r.scheduled_for >= %(since)s)
       AND (%(before_at)s::timestamptz IS NULL
            OR (r.scheduled_for, r.id) < (%(before_at)s, %(before_id)s::bigint))
       AND r.id NOT IN (SELECT l.id FROM live l WHERE l.id IS NOT NULL)
     ORDER BY r.scheduled_for DESC, r.id DESC
     LIMIT %(limit)s)
) AS x
ORDER BY x.scheduled_for DESC, x.id DESC NULLS FIRST
LIMIT %(limit)s
)
SELECT count(*) AS found,
       '[' || coalesce(string_agg(
           (SELECT row_to_json(o) FROM (SELECT {run_json:p}) AS o)::text, ', '
           ORDER BY p.scheduled_for DESC, p.id DESC NULLS FIRST), '') || ']' AS runs,
       (array_agg(p.scheduled_for ORDER BY p.scheduled_for, p.id))[1] AS last_at,
       (array_agg(p.id ORDER BY p.scheduled_for, p.id))[1] AS last_id
FROM page p;

-- name: lag_series
-- Fire lag of first attempts per minute over the window (the console's chart).
WITH clock AS NOT MATERIALIZED (
    SELECT coalesce(%(now)s::timestamptz, now()) AS t
)
SELECT date_trunc('minute', r.started_at) AS minute,
       percentile_cont(0.5) WITHIN GROUP (
           ORDER BY extract(epoch FROM r.started_at - r.scheduled_for))::float8 AS p50_s,
       percentile_cont(0.99) WITHIN GROUP (
           ORDER BY extract(epoch FROM r.started_at - r.scheduled_for))::float8 AS p99_s,
       count(*)::int AS samples
FROM runs r CROSS JOIN clock k
WHERE r.scheduled_for > k.t - make_interval(secs => %(window_s)s) - interval '1 hour'
  AND r.started_at > k.t - make_interval(secs => %(window_s)s)
  AND r.attempt = 1
  -- A slot a calendar or a blackout window moved started late (or early) on purpose.
  AND r.origin IS DISTINCT FROM 'calendar' AND r.origin IS DISTINCT FROM 'window'
GROUP BY 1
ORDER BY 1;
