-- Backfills: requests to run a job's slots of a range again, queued as flights
-- (cluster/store/housekeeping/backfills.py, runcontrol.py, docs/design/time.md).

-- name: backfill_insert
-- A backfill request (cluster/store/housekeeping/backfills.py): the nodes holding the job's shard queue
-- its slots as flights from cursor_at on.
INSERT INTO backfills (job_id, tenant_id, job_name, shard_id, range_from, range_to, cursor_at,
                       only_missing, max_parallel, slots_total, created_at, updated_at,
                       origin, payload)
SELECT %(job_id)s, %(tenant_id)s, %(job_name)s, %(shard_id)s, %(range_from)s, %(range_to)s,
       %(range_from)s, %(only_missing)s, %(max_parallel)s, %(slots_total)s, k.t, k.t,
       coalesce(%(origin)s, 'backfill'), %(payload)s
FROM (SELECT coalesce(%(now)s::timestamptz, now()) AS t) AS k
RETURNING *, 0 AS in_flight;

-- name: backfill_ran
-- Of the given slots of a job, those a request leaves out: with only_missing, those whose
-- run succeeded; and those whose attempt ended, a skip aside, since the request was made
-- (another request over the range, or the schedule, ran them meanwhile).
SELECT r.scheduled_for FROM runs r
WHERE r.job_id = %(job_id)s AND r.scheduled_for = ANY(%(slots)s::timestamptz[])
  AND ((%(only_missing)s AND r.status = 'succeeded')
       OR (r.status <> 'skipped' AND r.finished_at >= %(since)s::timestamptz));

-- name: backfill_list
-- The newest %(limit)s requests (NULL: all), oldest first.
SELECT * FROM (
    SELECT b.*, (SELECT count(*) FROM flights f WHERE f.backfill_id = b.id)::int AS in_flight
    FROM backfills b
    WHERE (%(tenant_id)s::text IS NULL OR b.tenant_id = %(tenant_id)s)
      AND (%(scope)s::text IS NULL OR b.tenant_id = %(scope)s)
    ORDER BY b.id DESC
    LIMIT %(limit)s
) AS newest
ORDER BY id;

-- name: backfill_cancel
-- Stops a backfill: no more slots are queued and its queued ones are dropped; slots already
-- running finish. Cancelling one that has ended changes nothing.
WITH found AS (
    SELECT b.id FROM backfills b
    WHERE b.id = %(id)s AND (%(scope)s::text IS NULL OR b.tenant_id = %(scope)s)
    FOR UPDATE
),
stopped AS (
    UPDATE backfills b SET status = 'cancelled', updated_at = now()
    FROM found x WHERE b.id = x.id AND b.status = 'active'
    RETURNING b.id
),
dropped AS (
    DELETE FROM flights f USING stopped s
    WHERE f.backfill_id = s.id AND f.status = 'queued'
    RETURNING 1
)
-- The statement sees the rows as they were before it: the status is the one just set.
SELECT b.id, b.tenant_id, b.job_name, b.range_from, b.range_to, b.cursor_at, b.only_missing,
       b.max_parallel, b.slots_total, b.slots_queued, b.created_at, b.origin,
       CASE WHEN EXISTS (SELECT 1 FROM stopped) THEN 'cancelled' ELSE b.status END AS status,
       (SELECT count(*) FROM dropped)::int AS dropped,
       (SELECT count(*) FROM flights f WHERE f.backfill_id = b.id AND f.status = 'running')::int
           AS in_flight
FROM backfills b JOIN found x ON b.id = x.id;

-- name: backfills_any
-- Whether a held shard has an active backfill: the one statement of an idle pass.
SELECT EXISTS (
    SELECT 1 FROM backfills b
    WHERE b.shard_id = ANY(%(shards)s::int[]) AND b.status = 'active'
) AS any;

-- name: backfill_active
-- The active backfills of the held shards, each with its job's schedule and its slots in
-- flight, locked so one node at a time moves a request's cursor (a shard changing hands).
SELECT b.id, b.job_id, b.shard_id, b.cursor_at, b.range_to, b.only_missing, b.max_parallel,
       b.created_at,
       j.schedule, j.tz, j.dst_repeated, j.dst_skipped, j.status AS job_status,
       (SELECT count(*) FROM flights f WHERE f.backfill_id = b.id)::int AS in_flight
FROM backfills b JOIN jobs j ON j.id = b.job_id
WHERE b.shard_id = ANY(%(shards)s::int[]) AND b.status = 'active'
ORDER BY b.id
FOR UPDATE OF b SKIP LOCKED;

-- name: backfill_queue
-- Queues the given slots of a backfill as flights (of its origin, `backfill` or `rerun`,
-- with its payload) due now and moves its
-- cursor, in the caller's transaction. A slot already in flight, or whose regular run is
-- going on, is not queued again (one claim per slot). The request is done once its cursor
-- passed the range and none of its slots is in flight.
WITH clock AS (
    SELECT coalesce(%(now)s::timestamptz, now()) AS t
),
queued AS (
    INSERT INTO flights (job_id, slot, shard_id, status, attempt, due_at, lease_token, origin,
                         backfill_id, revision, payload)
    SELECT j.id, s.slot, j.shard_id, 'queued', 1, k.t, j.lease_token, b.origin, b.id,
           j.revision, b.payload
    FROM unnest(%(slots)s::timestamptz[]) AS s(slot)
    JOIN jobs j ON j.id = %(job_id)s
    JOIN backfills b ON b.id = %(id)s
    CROSS JOIN clock k
    WHERE NOT (j.status = 'running' AND j.slot_at = s.slot)
    ON CONFLICT (job_id, slot) DO NOTHING
    RETURNING 1
)
UPDATE backfills b SET
    cursor_at = %(cursor)s,
    slots_queued = b.slots_queued + (SELECT count(*) FROM queued),
    status = CASE WHEN %(cursor)s >= b.range_to AND %(in_flight)s = 0
                       AND (SELECT count(*) FROM queued) = 0 THEN 'done' ELSE b.status END,
    updated_at = k.t
FROM clock k
WHERE b.id = %(id)s
RETURNING (SELECT count(*) FROM queued)::int AS queued, b.status;

-- name: rerun_asked
-- Whether a job's slot is asked for already: a rerun request not yet queued, or a flight.
SELECT 'queued' AS status FROM backfills b
WHERE b.job_id = %(job_id)s AND b.status = 'active' AND b.origin = 'rerun'
  AND b.range_from = %(slot)s
UNION ALL
SELECT f.status FROM flights f WHERE f.job_id = %(job_id)s AND f.slot = %(slot)s
LIMIT 1;
