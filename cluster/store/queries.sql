-- Every runtime statement of Pulse. Sections are loaded by cluster/store/queries.py.
-- Time-dependent statements take coalesce(%(now)s, now()) so tests can drive the clock.

-- name: db_now
SELECT coalesce(%(now)s::timestamptz, now()) AS now;

-- name: insert_job
INSERT INTO jobs (
    id, tenant_id, name, schedule, tz, dst_repeated, dst_skipped, handler, payload,
    status, paused, shard_id, next_run_at, slot_at, catch_up, grace_s, max_backfill,
    timeout_s, max_retries, retry_backoff_s)
VALUES (
    %(id)s, %(tenant_id)s, %(name)s, %(schedule)s, %(tz)s, %(dst_repeated)s, %(dst_skipped)s,
    %(handler)s, %(payload)s, CASE WHEN %(paused)s THEN 'paused' ELSE 'idle' END, %(paused)s,
    %(shard_id)s,
    CASE WHEN %(paused)s THEN '9999-01-01Z'::timestamptz ELSE %(next_run_at)s END,
    %(next_run_at)s, %(catch_up)s, %(grace_s)s,
    %(max_backfill)s, %(timeout_s)s, %(max_retries)s, %(retry_backoff_s)s)
ON CONFLICT (tenant_id, name) DO NOTHING
RETURNING id, shard_id;

-- name: upsert_job
-- Create, or update the definition of, the job (tenant_id, name). An unchanged definition
-- touches nothing (no row returned). A running job keeps its slot; an idle one whose
-- timing changed moves to the new schedule's next slot.
INSERT INTO jobs AS j (
    id, tenant_id, name, schedule, tz, dst_repeated, dst_skipped, handler, payload,
    status, paused, shard_id, next_run_at, slot_at, catch_up, grace_s, max_backfill,
    timeout_s, max_retries, retry_backoff_s)
VALUES (
    %(id)s, %(tenant_id)s, %(name)s, %(schedule)s, %(tz)s, %(dst_repeated)s, %(dst_skipped)s,
    %(handler)s, %(payload)s, CASE WHEN %(paused)s THEN 'paused' ELSE 'idle' END, %(paused)s,
    %(shard_id)s,
    CASE WHEN %(paused)s THEN '9999-01-01Z'::timestamptz ELSE %(next_run_at)s END,
    %(next_run_at)s, %(catch_up)s, %(grace_s)s,
    %(max_backfill)s, %(timeout_s)s, %(max_retries)s, %(retry_backoff_s)s)
ON CONFLICT (tenant_id, name) DO UPDATE SET
    schedule = excluded.schedule,
    tz = excluded.tz,
    dst_repeated = excluded.dst_repeated,
    dst_skipped = excluded.dst_skipped,
    handler = excluded.handler,
    payload = excluded.payload,
    paused = excluded.paused,
    catch_up = excluded.catch_up,
    grace_s = excluded.grace_s,
    max_backfill = excluded.max_backfill,
    timeout_s = excluded.timeout_s,
    max_retries = excluded.max_retries,
    retry_backoff_s = excluded.retry_backoff_s,
    status = CASE
        WHEN j.status = 'running' THEN 'running'
        WHEN excluded.paused THEN 'paused'
        ELSE 'idle' END,
    next_run_at = CASE
        WHEN j.status <> 'running' AND excluded.paused THEN excluded.next_run_at
        WHEN j.status <> 'running' AND (
            (j.schedule, j.tz, j.dst_repeated, j.dst_skipped)
                IS DISTINCT FROM (excluded.schedule, excluded.tz, excluded.dst_repeated,
                                  excluded.dst_skipped)
            OR (j.paused AND NOT excluded.paused))
        THEN excluded.next_run_at ELSE j.next_run_at END,
    slot_at = CASE
        WHEN j.status <> 'running' AND (
            (j.schedule, j.tz, j.dst_repeated, j.dst_skipped)
                IS DISTINCT FROM (excluded.schedule, excluded.tz, excluded.dst_repeated,
                                  excluded.dst_skipped)
            OR (j.paused AND NOT excluded.paused))
        THEN excluded.next_run_at ELSE j.slot_at END,
    attempt = CASE
        WHEN j.status <> 'running' AND (
            (j.schedule, j.tz, j.dst_repeated, j.dst_skipped)
                IS DISTINCT FROM (excluded.schedule, excluded.tz, excluded.dst_repeated,
                                  excluded.dst_skipped)
            OR (j.paused AND NOT excluded.paused))
        THEN 1 ELSE j.attempt END,
    updated_at = now()
WHERE (j.schedule, j.tz, j.dst_repeated, j.dst_skipped, j.handler, j.payload, j.paused,
       j.catch_up, j.grace_s, j.max_backfill, j.timeout_s, j.max_retries, j.retry_backoff_s)
    IS DISTINCT FROM
      (excluded.schedule, excluded.tz, excluded.dst_repeated, excluded.dst_skipped,
       excluded.handler, excluded.payload, excluded.paused, excluded.catch_up,
       excluded.grace_s, excluded.max_backfill, excluded.timeout_s, excluded.max_retries,
       excluded.retry_backoff_s)
RETURNING id, shard_id, (xmax = 0) AS inserted;

-- name: list_jobs
SELECT * FROM jobs
WHERE (%(tenant_id)s::text IS NULL OR tenant_id = %(tenant_id)s)
ORDER BY tenant_id, name;

-- name: get_job
SELECT * FROM jobs WHERE tenant_id = %(tenant_id)s AND name = %(name)s;

-- name: lock_job
SELECT * FROM jobs WHERE tenant_id = %(tenant_id)s AND name = %(name)s FOR UPDATE;

-- name: pause_job
UPDATE jobs SET
    paused = true,
    status = CASE WHEN status = 'running' THEN status ELSE 'paused' END,
    next_run_at = CASE WHEN status = 'running' THEN next_run_at
                       ELSE '9999-01-01Z'::timestamptz END,
    updated_at = now()
WHERE tenant_id = %(tenant_id)s AND name = %(name)s
RETURNING id, shard_id, status;

-- name: resume_job
-- A paused job continues at the schedule's next future slot (computed by the caller);
-- the slots it missed while paused are not run.
UPDATE jobs SET
    paused = false,
    status = CASE WHEN status = 'paused' THEN 'idle' ELSE status END,
    next_run_at = CASE WHEN status = 'paused' THEN %(next_run_at)s ELSE next_run_at END,
    slot_at = CASE WHEN status = 'paused' THEN %(next_run_at)s ELSE slot_at END,
    attempt = CASE WHEN status = 'paused' THEN 1 ELSE attempt END,
    updated_at = now()
WHERE tenant_id = %(tenant_id)s AND name = %(name)s
RETURNING id, shard_id, status;

-- name: trigger_job
-- Due now, for one extra slot stamped with the current time, keeping the regular schedule:
-- after the run the next slot follows the schedule again. A job that already has a due
-- slot (or a pending retry) just has it brought forward. A paused job runs once and
-- stays paused.
UPDATE jobs SET
    status = 'idle',
    slot_at = CASE WHEN status = 'paused' OR slot_at > n.t THEN n.t ELSE slot_at END,
    attempt = CASE WHEN status = 'paused' OR slot_at > n.t THEN 1 ELSE attempt END,
    next_run_at = CASE WHEN status = 'paused' OR next_run_at > n.t THEN n.t ELSE next_run_at END,
    updated_at = n.t
FROM (SELECT coalesce(%(now)s::timestamptz, now()) AS t) AS n
WHERE tenant_id = %(tenant_id)s AND name = %(name)s AND status <> 'running'
RETURNING id, shard_id, slot_at;

-- name: remove_job
DELETE FROM jobs WHERE tenant_id = %(tenant_id)s AND name = %(name)s RETURNING id, shard_id;

-- name: remove_jobs_except
DELETE FROM jobs
WHERE NOT ((tenant_id, name) IN (
    SELECT * FROM unnest(%(tenant_ids)s::text[], %(names)s::text[])))
RETURNING tenant_id, name;

-- name: list_runs
-- Run history, newest slot first. A finished attempt is a row of runs; an attempt in
-- flight has no row yet (the claim writes none) and is read from its job row as status
-- 'running'. It stands in for its slot's row when an earlier attempt of the slot left
-- one, keeping that row's id and last error (the attempt's own row will be that row);
-- otherwise its id is NULL.
WITH live AS (
    SELECT r.id, j.id AS job_id, j.tenant_id, j.name AS job_name, j.slot_at AS scheduled_for,
           j.attempt, j.locked_by AS node_id, j.locked_zone AS zone, 'running'::text AS status,
           j.lease_token, j.locked_at AS started_at, NULL::timestamptz AS finished_at,
           NULL::float8 AS duration_s, r.last_error
    FROM jobs j
    LEFT JOIN runs r ON r.job_id = j.id AND r.scheduled_for = j.slot_at
    WHERE j.status = 'running'
      AND (%(job_name)s::text IS NULL OR j.name = %(job_name)s)
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
            r.last_error
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

-- name: notify
SELECT pg_notify(%(channel)s, %(payload)s);

-- name: lock_session_setup
-- No JIT on the lock session: its statements are short and frequent, and the planner's
-- cost estimate for the claim over 256 shards of a million jobs crosses jit_above_cost,
-- which made a 5 ms claim take 80 ms compiling code each time.
SELECT set_config('jit', 'off', false);

-- name: try_lock_shards
-- Locks the given shards this session does not hold yet and returns every given shard it
-- holds afterwards. A held shard is never locked again: session advisory locks stack, and
-- a stacked lock would outlive the one unlock meant to hand the shard over.
WITH mine AS (
    SELECT objid::int AS shard FROM pg_locks
    WHERE locktype = 'advisory' AND pid = pg_backend_pid() AND granted
      AND classid = %(ns)s::int::oid AND objsubid = 2
)
SELECT s.shard FROM unnest(%(shards)s::int[]) AS s(shard)
WHERE CASE WHEN s.shard IN (SELECT m.shard FROM mine m) THEN true
           ELSE pg_try_advisory_lock(%(ns)s, s.shard) END;

-- name: unlock_shards
SELECT s.shard, pg_advisory_unlock(%(ns)s, s.shard) AS released
FROM unnest(%(shards)s::int[]) AS s(shard);

-- name: my_shard_locks
SELECT objid::int AS shard FROM pg_locks
WHERE locktype = 'advisory' AND pid = pg_backend_pid() AND granted
  AND classid = %(ns)s::int::oid AND objsubid = 2
ORDER BY 1;

-- name: shard_holders
-- Shard locks of this database (negative keys are lock sessions probing themselves).
SELECT l.objid::int AS shard, a.application_name AS node_id
FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
WHERE l.locktype = 'advisory' AND l.granted AND l.classid = %(ns)s::int::oid
  AND l.objsubid = 2 AND l.objid::int >= 0 AND a.datname = current_database()
ORDER BY 1;

-- name: ping
SELECT coalesce(%(now)s::timestamptz, now()) AS now;

-- name: claim
-- Claims the oldest due jobs of the held shards, at most %(limit)s, in one round trip.
-- Every read goes through the per-shard (shard_id, next_run_at) index, one probe per held
-- shard, so the work depends on the held shards and the limit, never on how many jobs are
-- due (or not) in other nodes' shards. (A walk of the cluster-wide due index in time
-- order reads every due row of the other shards when its own have none: 70-190 ms at
-- 133k due rows elsewhere, against about 2 ms here.) It is exact oldest-first, ties in
-- any order: each held shard offers its oldest few due jobs (heads, a quota of about
-- limit/shards each); the limit-th oldest head is a cutoff, and only a shard whose whole
-- quota came before the cutoff can hold more jobs older than it, so only such shards are
-- read further (deeper). The rows are locked with SKIP LOCKED and re-checked, and marked
-- running under a fresh lease token; no index names a column this update changes, so it
-- is a HOT update wherever the row's page has room (migration 003). Running jobs are in
-- the index range too (behind the status check), as many as the nodes' concurrency;
-- paused ones are not (their next_run_at is 9999-01-01 while paused). The claim writes
-- no run row: until the attempt ends the job row is its record (locked_by, locked_at,
-- locked_zone, slot_at, attempt, lease_token), and whatever ends it (complete, release,
-- recover) writes the row. The last columns tell the caller when the next job of these
-- shards falls due (only when the claim is not full), so it can sleep until then.
-- It looks %(ahead_s)s seconds ahead: jobs due by then are claimed too, so the node can
-- start them on time rather than one claim round trip late; locked_at, the start of the
-- attempt, is then its due time.
-- Candidates are locked and updated by their ctid (a TID scan each), not looked up twice
-- more by id (a tenth of the claim at a million jobs). A row changed by someone else since
-- this statement's snapshot is locked in its new version, which the update cannot see: it
-- is left for the next claim, never claimed twice.
WITH clock AS (
    SELECT c.t, c.t + make_interval(secs => %(ahead_s)s) AS due
    FROM (SELECT coalesce(%(now)s::timestamptz, now()) AS t) AS c
),
quota AS (
    SELECT ceil(%(limit)s::float8 / greatest(cardinality(%(shards)s::int[]), 1))::int + 1 AS n
),
heads AS (
    SELECT s.shard, c.id, c.next_run_at, c.ctid
    FROM unnest(%(shards)s::int[]) AS s(shard)
    CROSS JOIN LATERAL (
        SELECT j.id, j.next_run_at, j.ctid FROM jobs j
        WHERE j.shard_id = s.shard AND j.status = 'idle'
          AND j.next_run_at <= (SELECT due FROM clock)
        ORDER BY j.next_run_at
        LIMIT (SELECT n FROM quota)
    ) AS c
),
cutoff AS (
    SELECT coalesce(
        (SELECT h.next_run_at FROM heads h ORDER BY h.next_run_at
         OFFSET greatest(%(limit)s - 1, 0) LIMIT 1),
        'infinity') AS t
),
deeper AS (
    SELECT c.id, c.next_run_at, c.ctid
    FROM (SELECT h.shard FROM heads h GROUP BY h.shard
          HAVING count(*) >= (SELECT n FROM quota)
             AND max(h.next_run_at) < (SELECT t FROM cutoff)) AS s
    CROSS JOIN LATERAL (
        SELECT j.id, j.next_run_at, j.ctid FROM jobs j
        WHERE j.shard_id = s.shard AND j.status = 'idle'
          AND j.next_run_at <= (SELECT due FROM clock)
          AND j.next_run_at < (SELECT t FROM cutoff)
        ORDER BY j.next_run_at
        LIMIT %(limit)s
    ) AS c
),
candidates AS (
    SELECT h.id, h.next_run_at, h.ctid FROM heads h
    UNION
    SELECT d.id, d.next_run_at, d.ctid FROM deeper d
    ORDER BY next_run_at
    LIMIT %(limit)s
),
locked AS (
    SELECT j.ctid FROM jobs j JOIN candidates c ON j.ctid = c.ctid
    WHERE j.status = 'idle' AND j.next_run_at <= (SELECT due FROM clock)
    FOR UPDATE OF j SKIP LOCKED
),
claimed AS (
    UPDATE jobs j SET
        status = 'running',
        locked_by = %(node_id)s,
        locked_at = greatest(k.t, j.next_run_at),
        locked_zone = %(zone)s,
        lease_expires_at = k.t + make_interval(secs => %(lease_s)s),
        lease_token = j.lease_token + 1,
        updated_at = k.t
    FROM locked l, clock k
    WHERE j.ctid = l.ctid
    -- In the order of cluster.session.ClaimedJob's fields: the node builds it by position.
    -- An empty payload comes back as NULL: no JSON to parse for most jobs.
    RETURNING j.id, j.tenant_id, j.name, j.schedule, j.tz, j.dst_repeated, j.dst_skipped,
              j.handler, nullif(j.payload, '{}'::jsonb) AS payload, j.shard_id, j.slot_at,
              j.attempt, j.lease_token, j.catch_up, j.grace_s, j.max_backfill, j.timeout_s,
              j.max_retries, j.retry_backoff_s, j.next_run_at
),
next_due AS (
    SELECT min(x.next_run_at) AS t
    FROM unnest(%(shards)s::int[]) AS s(shard)
    CROSS JOIN LATERAL (
        SELECT j.next_run_at FROM jobs j
        WHERE j.shard_id = s.shard AND j.status = 'idle'
          AND j.next_run_at > (SELECT due FROM clock)
          AND j.next_run_at < '9999-01-01Z'::timestamptz  -- paused jobs
        ORDER BY j.next_run_at
        LIMIT 1
    ) AS x
    WHERE (SELECT count(*) FROM locked) < %(limit)s
)
SELECT k.t AS db_now, (SELECT t FROM next_due) AS next_due, c.*
FROM clock k LEFT JOIN claimed c ON true
ORDER BY c.slot_at;

-- name: complete
-- Fenced, batched completion: only rows still running under the caller's lease token
-- change; a stale completion writes nothing. Sets each job's next slot, writes the run
-- row of the attempt that ended, and records the slots the catch-up policy skipped.
-- Returns the ids that were applied. The run row is inserted, or updated in place when an
-- earlier attempt of the same slot left one (one row per slot). Its attempt and
-- started_at (the claim time; none for a slot skipped at claim) come from the job row as
-- it was before this statement, `o`: the update changes the attempt, and Postgres cannot
-- return a column's old value. The batch travels as two JSON arrays, one text parameter
-- each, far cheaper for the client to encode than a dozen typed arrays: %(done)s holds
-- [id, token, slot, outcome, error, duration_us, next_run_at, next_slot, next_attempt]
-- per completion (duration in whole microseconds; next_slot null: the same as
-- next_run_at), %(skips)s
-- [job_id, slot, reason] per skipped slot. The batch is parsed once (MATERIALIZED), and
-- `j.id = ANY(...)` hands the planner the ids as an index condition: the statistics of
-- jobs are gathered while few jobs run, so on `status = 'running'` alone it would scan
-- the table and re-read the batch for every running job (140 ms for 100 completions over
-- 3,000 running jobs, against 6 ms by jobs_pkey; tests/integration/test_lease_plans.py).
WITH clock AS (
    SELECT coalesce(%(now)s::timestamptz, now()) AS t
),
input AS MATERIALIZED (
    SELECT (e->>0)::uuid AS id, (e->>1)::bigint AS token, (e->>2)::timestamptz AS slot,
           e->>3 AS outcome, e->>4 AS error, (e->>5)::bigint / 1e6::float8 AS duration_s,
           (e->>6)::timestamptz AS next_run_at,
           coalesce(e->>7, e->>6)::timestamptz AS next_slot,
           (e->>8)::int AS next_attempt
    FROM json_array_elements(%(done)s::json) AS e
),
done AS (
    UPDATE jobs j SET
        status = CASE WHEN j.paused THEN 'paused' ELSE 'idle' END,
        next_run_at = CASE WHEN j.paused THEN '9999-01-01Z'::timestamptz
                           ELSE i.next_run_at END,
        slot_at = i.next_slot,
        attempt = i.next_attempt,
        last_run_at = CASE WHEN i.outcome = 'skipped' THEN j.last_run_at ELSE i.slot END,
        locked_by = NULL,
        locked_at = NULL,
        locked_zone = NULL,
        lease_expires_at = NULL,
        updated_at = k.t
    FROM input i JOIN jobs o ON o.id = i.id, clock k
    WHERE j.id = ANY(ARRAY(SELECT x.id FROM input x))
      AND j.id = i.id AND j.lease_token = i.token AND j.status = 'running'
    RETURNING j.id, j.tenant_id, j.name, i.slot, i.token, i.outcome, i.error, i.duration_s,
              o.attempt, o.locked_at
),
history AS (
    INSERT INTO runs AS r (job_id, tenant_id, job_name, scheduled_for, attempt, node_id,
                           zone, status, lease_token, started_at, finished_at, duration_s,
                           last_error)
    SELECT d.id, d.tenant_id, d.name, d.slot, d.attempt, %(node_id)s, %(zone)s, d.outcome,
           d.token, CASE WHEN d.outcome = 'skipped' THEN NULL ELSE d.locked_at END, k.t,
           d.duration_s, d.error
    FROM done d, clock k
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
),
skipped AS (
    -- Never the completed slot itself: one statement cannot write a run row twice.
    INSERT INTO runs (job_id, tenant_id, job_name, scheduled_for, attempt, node_id, zone,
                      status, finished_at, last_error)
    SELECT d.id, d.tenant_id, d.name, s.slot, 1, %(node_id)s, %(zone)s, 'skipped', k.t,
           s.reason
    FROM (SELECT (e->>0)::uuid AS job_id, (e->>1)::timestamptz AS slot, e->>2 AS reason
          FROM json_array_elements(%(skips)s::json) AS e) AS s
    JOIN done d ON d.id = s.job_id AND d.slot <> s.slot
    CROSS JOIN clock k
    ON CONFLICT (job_id, scheduled_for) DO NOTHING
)
SELECT id FROM done;

-- name: renew
-- Extends the leases of the caller's running jobs; returns the ids still held. The ids
-- are an index condition too, for the reason given at `complete`.
UPDATE jobs j SET lease_expires_at = k.t + make_interval(secs => %(lease_s)s)
FROM unnest(%(ids)s::uuid[], %(tokens)s::bigint[]) AS i(id, token),
     (SELECT coalesce(%(now)s::timestamptz, now()) AS t) AS k
WHERE j.id = ANY(%(ids)s::uuid[])
  AND j.id = i.id AND j.lease_token = i.token AND j.status = 'running'
RETURNING j.id;

-- name: release
-- Hands running jobs back for another attempt of the same slot, due at once (used when a
-- node shuts down before its runs finish), and records the attempt that ended as lost in
-- its slot's run row (from `o`, the job row before this statement). Fenced like a
-- completion, and its ids are an index condition for the same reason.
WITH clock AS (
    SELECT coalesce(%(now)s::timestamptz, now()) AS t
),
freed AS (
    UPDATE jobs j SET
        status = CASE WHEN j.paused THEN 'paused' ELSE 'idle' END,
        next_run_at = CASE WHEN j.paused THEN '9999-01-01Z'::timestamptz ELSE k.t END,
        attempt = j.attempt + 1,
        locked_by = NULL,
        locked_at = NULL,
        locked_zone = NULL,
        lease_expires_at = NULL,
        lease_token = j.lease_token + 1,
        updated_at = k.t
    FROM unnest(%(ids)s::uuid[], %(tokens)s::bigint[]) AS i(id, token)
         JOIN jobs o ON o.id = i.id,
         clock k
    WHERE j.id = ANY(%(ids)s::uuid[])
      AND j.id = i.id AND j.lease_token = i.token AND j.status = 'running'
    RETURNING j.id, j.tenant_id, j.name, j.slot_at, o.attempt, i.token, o.locked_by,
              o.locked_zone, o.locked_at
),
history AS (
    INSERT INTO runs AS r (job_id, tenant_id, job_name, scheduled_for, attempt, node_id,
                           zone, status, lease_token, started_at, finished_at, last_error)
    SELECT f.id, f.tenant_id, f.name, f.slot_at, f.attempt, f.locked_by, f.locked_zone,
           'lost', f.token, f.locked_at, k.t, %(reason)s
    FROM freed f, clock k
    ON CONFLICT (job_id, scheduled_for) DO UPDATE SET
        attempt = excluded.attempt,
        node_id = excluded.node_id,
        zone = excluded.zone,
        status = excluded.status,
        lease_token = excluded.lease_token,
        started_at = excluded.started_at,
        finished_at = excluded.finished_at,
        duration_s = NULL,
        last_error = excluded.last_error
)
SELECT id FROM freed;

-- name: recover
-- Takes back, in the given shards, the slots of runs whose owner is dead (not among the
-- live node ids and without a Postgres session named after it) or whose lease expired.
-- With %(own)s (at start-up, before this process has claimed anything) it takes back
-- instead every run still under this node id, %(node_id)s: an earlier process of the same
-- node (killed, restarted under a fixed id) left them, and the dead-owner test cannot tell
-- them from this one (same id, live session). The flag is a constant when the statement is
-- planned, so only its own branch is read. A compare-and-set on (status, lease_token) in
-- database time, so a run that has just finished is never overwritten. The slot is kept;
-- it is due again at once as the next attempt, and the attempt that was lost is recorded
-- in the slot's run row. Returns the jobs as reset (attempt is the next one) with the lost
-- attempt's owner and reason.
WITH clock AS (
    SELECT coalesce(%(now)s::timestamptz, now()) AS t
),
sessions AS (
    SELECT DISTINCT application_name AS node_id FROM pg_stat_activity
    WHERE application_name <> '' AND datname = current_database()
),
-- The runs to take back, locked: in the given shards, read through the due index a probe
-- per shard (every running job was due by its claim, plus the claim's look-ahead, a
-- fraction of a second, which bounds each probe); or, with %(own)s, this node's own. The
-- probes are subqueries that lock, so the planner keeps them: left to itself it scanned
-- the whole table of a few thousand jobs at every pass (4-6 ms at 20,000 jobs).
dead AS (
    SELECT d.* FROM unnest(%(shards)s::int[]) AS s(shard)
    CROSS JOIN LATERAL (
        SELECT j.ctid, j.id, j.lease_token, j.attempt, j.locked_by, j.locked_zone, j.locked_at,
               CASE WHEN j.lease_expires_at < k.t THEN 'lease expired'
                    ELSE 'owner gone' END AS reason
        FROM jobs j CROSS JOIN clock k
        WHERE j.shard_id = s.shard AND j.status = 'running'
          AND j.next_run_at <= k.t + interval '1 minute'
          AND (j.lease_expires_at < k.t
               OR (NOT (j.locked_by = ANY(%(live)s::text[]))
                   AND j.locked_by NOT IN (SELECT node_id FROM sessions)))
        FOR UPDATE OF j SKIP LOCKED
    ) AS d
    WHERE NOT %(own)s
    UNION ALL
    SELECT o.* FROM (
        SELECT j.ctid, j.id, j.lease_token, j.attempt, j.locked_by, j.locked_zone, j.locked_at,
               'previous process gone' AS reason
        FROM jobs j
        WHERE %(own)s AND j.status = 'running' AND j.locked_by = %(node_id)s
        FOR UPDATE OF j SKIP LOCKED
    ) AS o
),
reset AS (
    UPDATE jobs j SET
        status = CASE WHEN j.paused THEN 'paused' ELSE 'idle' END,
        next_run_at = CASE WHEN j.paused THEN '9999-01-01Z'::timestamptz ELSE k.t END,
        attempt = j.attempt + 1,
        locked_by = NULL,
        locked_at = NULL,
        locked_zone = NULL,
        lease_expires_at = NULL,
        lease_token = j.lease_token + 1,
        updated_at = k.t
    FROM dead d, clock k
    -- The rows are locked: their ctids hold until this transaction ends. Looked up as a
    -- list, so the update reads them alone however few jobs the table has.
    WHERE j.ctid = ANY(ARRAY(SELECT ctid FROM dead))
      AND j.id = d.id AND j.lease_token = d.lease_token AND j.status = 'running'
    RETURNING j.id, j.tenant_id, j.name, j.slot_at, j.attempt, d.lease_token AS old_token,
              d.locked_by, d.reason, d.attempt AS lost_attempt, d.locked_zone, d.locked_at
),
history AS (
    INSERT INTO runs AS r (job_id, tenant_id, job_name, scheduled_for, attempt, node_id,
                           zone, status, lease_token, started_at, finished_at, last_error)
    SELECT x.id, x.tenant_id, x.name, x.slot_at, x.lost_attempt, x.locked_by, x.locked_zone,
           'lost', x.old_token, x.locked_at, k.t,
           x.reason || ' (node ' || coalesce(x.locked_by, '?') || ')'
    FROM reset x, clock k
    ON CONFLICT (job_id, scheduled_for) DO UPDATE SET
        attempt = excluded.attempt,
        node_id = excluded.node_id,
        zone = excluded.zone,
        status = excluded.status,
        lease_token = excluded.lease_token,
        started_at = excluded.started_at,
        finished_at = excluded.finished_at,
        duration_s = NULL,
        last_error = excluded.last_error
)
SELECT * FROM reset;

-- name: live_sessions
-- Which of the given node ids still have a Postgres session (their lock session carries
-- the node id as application_name) in this database: a namesake connected to another
-- database on the same server is another cluster's node.
SELECT DISTINCT application_name AS node_id FROM pg_stat_activity
WHERE application_name = ANY(%(ids)s::text[]) AND datname = current_database();

-- status views
-- Read-only statements behind `pulse status`.

-- name: status_in_flight
-- Runs in flight per node: jobs running under a lease, by the node that claimed them.
SELECT j.locked_by AS node_id, count(*)::int AS runs
FROM jobs j
WHERE j.status = 'running'
GROUP BY j.locked_by
ORDER BY 1;

-- name: status_backlog
-- The due backlog: idle jobs whose next run is due by the database clock, and how late
-- the oldest of them is.
WITH clock AS (
    SELECT coalesce(%(now)s::timestamptz, now()) AS t
)
SELECT k.t AS db_now, count(j.id)::int AS due,
       extract(epoch FROM k.t - min(j.next_run_at))::float8 AS oldest_s
FROM clock k LEFT JOIN jobs j ON j.status = 'idle' AND j.next_run_at <= k.t
GROUP BY k.t;

-- name: status_fire_lag
-- Fire lag (claim time minus slot time) of first attempts started within the window: the
-- finished ones from their run rows, those in flight from their job rows. Only slots of
-- the last horizon are read, so the scan stays on runs_recent; a slot fired later than
-- that after its time is not in this view. clock is inlined (NOT MATERIALIZED) though
-- read twice, so the planner sees the window's bounds as constants and estimates the
-- scan of runs as it does with one reference.
WITH clock AS NOT MATERIALIZED (
    SELECT coalesce(%(now)s::timestamptz, now()) AS t
),
started AS (
    SELECT r.started_at, r.scheduled_for
    FROM runs r CROSS JOIN clock k
    WHERE r.scheduled_for > k.t - make_interval(secs => %(horizon_s)s)
      AND r.attempt = 1 AND r.status <> 'running'
      AND r.started_at > k.t - make_interval(secs => %(window_s)s)
    UNION ALL
    SELECT j.locked_at, j.slot_at
    FROM jobs j CROSS JOIN clock k
    WHERE j.status = 'running' AND j.attempt = 1
      AND j.slot_at > k.t - make_interval(secs => %(horizon_s)s)
      AND j.locked_at > k.t - make_interval(secs => %(window_s)s)
)
SELECT count(*)::int AS samples,
       percentile_cont(0.5) WITHIN GROUP (
           ORDER BY extract(epoch FROM s.started_at - s.scheduled_for))::float8 AS p50_s,
       percentile_cont(0.99) WITHIN GROUP (
           ORDER BY extract(epoch FROM s.started_at - s.scheduled_for))::float8 AS p99_s
FROM started s;

-- name: status_outcomes
-- Slots by the state of their latest attempt: the run rows that finished within the
-- window, and as 'running' the attempts in flight (job rows) that started within it,
-- among the slots of the last horizon (again to stay on runs_recent). A slot whose next
-- attempt is in flight counts as running, not as its earlier attempt's outcome. Its CTEs
-- are inlined for the reason given in status_fire_lag.
WITH clock AS NOT MATERIALIZED (
    SELECT coalesce(%(now)s::timestamptz, now()) AS t
),
live AS NOT MATERIALIZED (
    SELECT j.id, j.slot_at, j.locked_at FROM jobs j WHERE j.status = 'running'
)
SELECT r.status, count(*)::int AS runs
FROM runs r CROSS JOIN clock k
WHERE r.scheduled_for > k.t - make_interval(secs => %(horizon_s)s)
  AND r.finished_at > k.t - make_interval(secs => %(window_s)s)
  AND r.status <> 'running'
  AND (r.job_id, r.scheduled_for) NOT IN (SELECT l.id, l.slot_at FROM live l)
GROUP BY r.status
UNION ALL
SELECT 'running', count(*)::int
FROM live l CROSS JOIN clock k
WHERE l.slot_at > k.t - make_interval(secs => %(horizon_s)s)
  AND l.locked_at > k.t - make_interval(secs => %(window_s)s)
ORDER BY 1;
