-- Every runtime statement of Pulse. Sections are loaded by cluster/store/queries.py.
-- Time-dependent statements take coalesce(%(now)s, now()) so tests can drive the clock.

-- name: db_now
SELECT coalesce(%(now)s::timestamptz, now()) AS now;

-- name: upsert_job
-- Create, or update the definition of, the job (tenant_id, name). An unchanged definition,
-- or an existing one when `replace` is false (`jobs add`), touches nothing (no row
-- returned). A running job keeps its slot; an idle one whose timing changed moves to the
-- new schedule's next slot.
INSERT INTO jobs AS j (
    id, tenant_id, name, schedule, tz, dst_repeated, dst_skipped, handler, payload,
    status, paused, shard_id, next_run_at, slot_at, catch_up, grace_s, max_backfill,
    timeout_s, max_retries, retry_backoff_s, keep_for_s, keep_runs, output_limit,
    late_after_s, pause_after_failures, overlap, max_concurrent, cancel_grace_s, jitter_s,
    remove_when_done)
VALUES (
    %(id)s, %(tenant_id)s, %(name)s, %(schedule)s, %(tz)s, %(dst_repeated)s, %(dst_skipped)s,
    %(handler)s, %(payload)s, CASE WHEN %(paused)s THEN 'paused' ELSE 'idle' END, %(paused)s,
    %(shard_id)s,
    CASE WHEN %(paused)s THEN '9999-01-01Z'::timestamptz ELSE %(next_run_at)s END,
    %(slot_at)s, %(catch_up)s, %(grace_s)s,
    %(max_backfill)s, %(timeout_s)s, %(max_retries)s, %(retry_backoff_s)s, %(keep_for_s)s,
    %(keep_runs)s, %(output_limit)s, %(late_after_s)s, %(pause_after_failures)s,
    %(overlap)s, %(max_concurrent)s, %(cancel_grace_s)s, %(jitter_s)s, %(remove_when_done)s)
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
    keep_for_s = excluded.keep_for_s,
    keep_runs = excluded.keep_runs,
    output_limit = excluded.output_limit,
    late_after_s = excluded.late_after_s,
    pause_after_failures = excluded.pause_after_failures,
    overlap = excluded.overlap,
    max_concurrent = excluded.max_concurrent,
    cancel_grace_s = excluded.cancel_grace_s,
    jitter_s = excluded.jitter_s,
    remove_when_done = excluded.remove_when_done,
    status = CASE
        WHEN j.status = 'running' THEN 'running'
        WHEN excluded.paused THEN 'paused'
        -- A done one-off job stays done unless it is given another time.
        WHEN j.status = 'done' AND (j.schedule, j.tz) = (excluded.schedule, excluded.tz)
            THEN 'done'
        ELSE 'idle' END,
    -- An idle job moves to the new next slot when its timing changed or it is resumed;
    -- excluded.next_run_at is that slot's jittered start, excluded.slot_at the slot.
    (next_run_at, slot_at, attempt, slot_origin) = (
        SELECT CASE WHEN m.moves OR (j.status <> 'running' AND excluded.paused)
                    THEN excluded.next_run_at ELSE j.next_run_at END,
               CASE WHEN m.moves THEN excluded.slot_at ELSE j.slot_at END,
               CASE WHEN m.moves THEN 1 ELSE j.attempt END,
               CASE WHEN m.moves THEN NULL ELSE j.slot_origin END
        FROM (SELECT j.status <> 'running' AND (
                  (j.schedule, j.tz, j.dst_repeated, j.dst_skipped, j.jitter_s)
                      IS DISTINCT FROM (excluded.schedule, excluded.tz, excluded.dst_repeated,
                                        excluded.dst_skipped, excluded.jitter_s)
                  OR (j.paused AND NOT excluded.paused)) AS moves) m),
    updated_at = now()
WHERE %(replace)s
  AND (j.schedule, j.tz, j.dst_repeated, j.dst_skipped, j.handler, j.payload, j.paused,
       j.catch_up, j.grace_s, j.max_backfill, j.timeout_s, j.max_retries, j.retry_backoff_s,
       j.keep_for_s, j.keep_runs, j.output_limit, j.late_after_s, j.pause_after_failures,
       j.overlap, j.max_concurrent, j.cancel_grace_s, j.jitter_s, j.remove_when_done)
    IS DISTINCT FROM
      (excluded.schedule, excluded.tz, excluded.dst_repeated, excluded.dst_skipped,
       excluded.handler, excluded.payload, excluded.paused, excluded.catch_up,
       excluded.grace_s, excluded.max_backfill, excluded.timeout_s, excluded.max_retries,
       excluded.retry_backoff_s, excluded.keep_for_s, excluded.keep_runs,
       excluded.output_limit, excluded.late_after_s, excluded.pause_after_failures,
       excluded.overlap, excluded.max_concurrent, excluded.cancel_grace_s, excluded.jitter_s,
       excluded.remove_when_done)
RETURNING id, shard_id, (xmax = 0) AS inserted, status;

-- name: list_jobs
SELECT * FROM jobs
WHERE (%(tenant_id)s::text IS NULL OR tenant_id = %(tenant_id)s)
ORDER BY tenant_id, name;

-- name: get_job
-- %(scope)s: the tenant an API token is scoped to, else NULL (here and below).
SELECT * FROM jobs WHERE tenant_id = %(tenant_id)s AND name = %(name)s
    AND (%(scope)s::text IS NULL OR tenant_id = %(scope)s);

-- name: lock_job
SELECT * FROM jobs WHERE tenant_id = %(tenant_id)s AND name = %(name)s
    AND (%(scope)s::text IS NULL OR tenant_id = %(scope)s)
FOR UPDATE;

-- name: pause_job
UPDATE jobs SET
    paused = true,
    pause_note = %(note)s,
    status = CASE WHEN status IN ('running', 'done') THEN status ELSE 'paused' END,
    next_run_at = CASE WHEN status = 'running' THEN next_run_at
                       ELSE '9999-01-01Z'::timestamptz END,
    updated_at = now()
WHERE tenant_id = %(tenant_id)s AND name = %(name)s
  AND (%(scope)s::text IS NULL OR tenant_id = %(scope)s)
RETURNING id, shard_id, status;

-- name: resume_job
-- A paused job continues at the schedule's next future slot (computed by the caller);
-- the slots it missed while paused are not run.
UPDATE jobs SET
    paused = false,
    pause_note = NULL,
    failed_slots = 0,
    status = CASE WHEN status = 'paused' THEN 'idle' ELSE status END,
    next_run_at = CASE WHEN status = 'paused' THEN %(next_run_at)s ELSE next_run_at END,
    slot_at = CASE WHEN status = 'paused' THEN %(slot_at)s ELSE slot_at END,
    slot_origin = CASE WHEN status = 'paused' THEN NULL ELSE slot_origin END,
    attempt = CASE WHEN status = 'paused' THEN 1 ELSE attempt END,
    updated_at = now()
WHERE tenant_id = %(tenant_id)s AND name = %(name)s
  AND (%(scope)s::text IS NULL OR tenant_id = %(scope)s)
RETURNING id, shard_id, status;

-- name: trigger_job
-- Due now, for one extra slot stamped with the current time; the schedule goes on after
-- it. A due slot or pending retry is just brought forward; a paused job runs once and
-- stays paused (tests/integration/test_store.py).
UPDATE jobs SET
    status = 'idle',
    slot_origin = CASE WHEN status = 'paused' OR slot_at > n.t THEN 'trigger'
                       ELSE slot_origin END,
    slot_at = CASE WHEN status = 'paused' OR slot_at > n.t THEN n.t ELSE slot_at END,
    attempt = CASE WHEN status = 'paused' OR slot_at > n.t THEN 1 ELSE attempt END,
    next_run_at = CASE WHEN status = 'paused' OR next_run_at > n.t THEN n.t ELSE next_run_at END,
    updated_at = n.t
FROM (SELECT coalesce(%(now)s::timestamptz, now()) AS t) AS n
WHERE tenant_id = %(tenant_id)s AND name = %(name)s AND status <> 'running'
  AND (%(scope)s::text IS NULL OR tenant_id = %(scope)s)
RETURNING id, shard_id, slot_at;

-- name: cancel_job
-- Asks whoever runs the job's slot to cancel it: the given slot, or whichever is running.
-- The request stays on the job row until the slot ends (every attempt of the slot sees it).
UPDATE jobs SET cancel_by = %(by)s
WHERE tenant_id = %(tenant_id)s AND name = %(name)s AND status = 'running'
  AND (%(scope)s::text IS NULL OR tenant_id = %(scope)s)
  AND overlap <> 'allow'  -- its slots run as flights (cancel_flights)
  AND (%(slot)s::timestamptz IS NULL OR slot_at = %(slot)s)
RETURNING id, shard_id, slot_at, attempt, lease_token, locked_by, overlap;

-- name: remove_job
DELETE FROM jobs WHERE tenant_id = %(tenant_id)s AND name = %(name)s
    AND (%(scope)s::text IS NULL OR tenant_id = %(scope)s)
RETURNING id, shard_id;

-- name: remove_jobs_except
-- An each-zone job's children (parent_id) are not in job files: they go with their parent.
DELETE FROM jobs
WHERE NOT ((tenant_id, name) IN (
    SELECT * FROM unnest(%(tenant_ids)s::text[], %(names)s::text[])))
  AND parent_id IS NULL
RETURNING tenant_id, name;

-- name: list_runs
-- Run history, newest slot first: the rows of runs, and as 'running' the attempts in flight
-- read from their job rows, each in place of its slot's row if an earlier attempt left one
-- (keeping its id and last error; else the id is NULL). tests/integration/test_history.py.
WITH live AS (
    SELECT r.id, j.id AS job_id, j.tenant_id, j.name AS job_name, j.slot_at AS scheduled_for,
           j.attempt, j.locked_by AS node_id, j.locked_zone AS zone, 'running'::text AS status,
           j.lease_token, j.locked_at AS started_at, NULL::timestamptz AS finished_at,
           NULL::float8 AS duration_s, r.last_error,
           coalesce(j.slot_origin, 'schedule') AS origin
    FROM jobs j
    LEFT JOIN runs r ON r.job_id = j.id AND r.scheduled_for = j.slot_at
    WHERE j.status = 'running' AND j.overlap <> 'allow'  -- its slots: the flights below
      AND (%(job_name)s::text IS NULL OR j.name = %(job_name)s)
      AND (%(tenant_id)s::text IS NULL OR j.tenant_id = %(tenant_id)s)
    UNION ALL
    -- Flights of overlap `allow` jobs (migration 009).
    SELECT r.id, j.id, j.tenant_id, j.name, f.slot, f.attempt, f.locked_by, f.locked_zone,
           'running'::text, f.lease_token, f.locked_at, NULL::timestamptz, NULL::float8,
           r.last_error, coalesce(f.origin, 'schedule')
    FROM flights f
    JOIN jobs j ON j.id = f.job_id
    LEFT JOIN runs r ON r.job_id = f.job_id AND r.scheduled_for = f.slot
    WHERE f.status = 'running'
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
            r.last_error, coalesce(r.origin, 'schedule')
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
           NULL::float8 AS duration_s, r.last_error, NULL::jsonb AS output, 0 AS settled
    FROM job j
    LEFT JOIN runs r ON r.job_id = j.id AND r.scheduled_for = j.slot_at
    WHERE j.status = 'running'
      AND (%(slot)s::timestamptz IS NULL OR j.slot_at = %(slot)s::timestamptz)
    UNION ALL
    (SELECT r.id, r.job_id, r.tenant_id, r.job_name, r.scheduled_for, r.attempt, r.node_id,
            r.zone, r.status, r.lease_token, r.started_at, r.finished_at, r.duration_s,
            r.last_error, r.output, 1
     FROM job j JOIN runs r ON r.job_id = j.id
     WHERE (%(slot)s::timestamptz IS NULL OR r.scheduled_for = %(slot)s::timestamptz)
     ORDER BY r.scheduled_for DESC
     LIMIT 1)
) AS x
ORDER BY x.scheduled_for DESC, x.settled
LIMIT 1;

-- name: notify
SELECT pg_notify(%(channel)s, %(payload)s);

-- name: lock_session_setup
-- No JIT on the lock session: over many shards the claim's cost estimate crosses
-- jit_above_cost, and compiling costs far more than running it (test_session.py,
-- test_claim_plan.py).
SELECT set_config('jit', 'off', false);

-- name: try_lock_shards
-- Locks the given shards not held yet; returns every given shard held afterwards. Never
-- twice: session advisory locks stack, and a stacked lock would outlive the one unlock
-- that hands the shard over (test_session.py: test_shard_locks_are_exclusive_...).
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
-- The oldest jobs due by now + %(ahead_s)s in the held shards, at most %(limit)s, marked
-- running under a fresh lease token, and when the next job of these shards falls due.
-- With %(fair)s, across tenants in turn, oldest first within each.
-- Why so: docs/design/claim-plan.md, fairness.md; guarded by tests/integration/
-- test_claim_plan.py and test_fair_claim.py.
WITH RECURSIVE clock AS (
    SELECT c.t, c.t + %(ahead_s)s * interval '1s' AS due
    FROM (SELECT coalesce(%(now)s::timestamptz, now()) AS t) AS c
),
-- Each held shard offers its oldest few due jobs (heads: %(quota)s, a little more than its
-- even share of the limit), one index probe per shard, so the work never depends on what
-- is due in other nodes' shards. The quota is read by a subquery, unknown when planned:
-- planned for a known quota of 2 or 3, a small claim cost 0.8 ms more.
heads AS (
    SELECT s.shard, c.id, c.next_run_at, c.ctid, c.tenant_id
    FROM unnest(%(shards)s::int[]) AS s(shard)
    CROSS JOIN LATERAL (
        SELECT j.id, j.next_run_at, j.ctid, j.tenant_id FROM jobs j
        WHERE j.shard_id = s.shard AND j.status = 'idle'
          AND j.next_run_at <= (SELECT due FROM clock)
        ORDER BY j.next_run_at
        LIMIT (SELECT %(quota)s::int)
    ) AS c
),
-- Only a shard whose whole quota came before the limit-th oldest head can hold more jobs
-- older than it: only those are read further (deeper). Exact oldest-first, ties in any order.
cutoff AS (
    SELECT coalesce(
        (SELECT h.next_run_at FROM heads h ORDER BY h.next_run_at
         OFFSET greatest(%(limit)s - 1, 0) LIMIT 1),
        'infinity') AS t
),
deeper AS (
    SELECT c.id, c.next_run_at, c.ctid, c.tenant_id
    FROM (SELECT h.shard FROM heads h GROUP BY h.shard
          HAVING count(*) >= %(quota)s
             AND max(h.next_run_at) < (SELECT t FROM cutoff)) AS s
    CROSS JOIN LATERAL (
        SELECT j.id, j.next_run_at, j.ctid, j.tenant_id FROM jobs j
        WHERE j.shard_id = s.shard AND j.status = 'idle'
          AND j.next_run_at <= (SELECT due FROM clock)
          AND j.next_run_at < (SELECT t FROM cutoff)
        ORDER BY j.next_run_at
        LIMIT %(limit)s
    ) AS c
),
-- Fair fan-out, asked for by a node whose last claim was full (node/pipeline/claimer.py): the
-- tenants with jobs in each held shard, one probe of jobs_tenant_due each (a loose index
-- scan, migration 013); those with a job due there; then each such tenant's oldest due
-- jobs in the shard, as many as its turns in this claim can take.
present AS (
    SELECT s.shard, (SELECT min(j.tenant_id) FROM jobs j WHERE j.shard_id = s.shard) AS tenant
    FROM unnest(%(shards)s::int[]) AS s(shard)
    WHERE %(fair)s
    UNION ALL
    SELECT p.shard, (SELECT min(j.tenant_id) FROM jobs j
                     WHERE j.shard_id = p.shard AND j.tenant_id > p.tenant)
    FROM present p
    WHERE p.tenant IS NOT NULL
),
-- A lateral probe, not EXISTS: that may become a semi-join over every row of jobs.
pairs AS (
    SELECT p.shard, p.tenant, count(*) OVER (PARTITION BY p.tenant) AS spread
    FROM present p
    CROSS JOIN LATERAL (
        SELECT 1 FROM jobs j
        WHERE j.shard_id = p.shard AND j.tenant_id = p.tenant
          AND j.next_run_at <= (SELECT due FROM clock)
        LIMIT 1
    ) AS d
),
-- Each tenant's share of this claim (limit / tenants), read evenly from its shards.
fair AS (
    SELECT c.id, c.next_run_at, c.ctid, c.tenant_id
    FROM pairs p
    CROSS JOIN LATERAL (
        SELECT j.id, j.next_run_at, j.ctid, j.tenant_id FROM jobs j
        WHERE j.shard_id = p.shard AND j.tenant_id = p.tenant AND j.status = 'idle'
          AND j.next_run_at <= (SELECT due FROM clock)
        ORDER BY j.next_run_at
        LIMIT ceil(%(limit)s::float8 / (SELECT count(DISTINCT tenant) FROM pairs)
                   / p.spread)::int + 1
    ) AS c
),
-- Oldest first; fair: by turn (each tenant's oldest, then each one's second oldest, ...),
-- then oldest first. Beyond its read turns a tenant is served from the oldest (heads).
-- A tenant's turns beyond its free places (migration 014) are `held`, and come last. Ties
-- (a fan-out's jobs share their due time) go by lot, so a claim smaller than the tenants
-- due does not favour the same tenant every time.
candidates AS (
    SELECT u.id, u.next_run_at, u.ctid, u.turn > r.room IS TRUE AS held FROM (
        SELECT x.*, row_number() OVER (PARTITION BY x.tenant_id ORDER BY x.next_run_at) AS turn
        FROM (SELECT h.id, h.next_run_at, h.ctid, h.tenant_id FROM heads h
              UNION SELECT * FROM deeper UNION SELECT * FROM fair) AS x
    ) AS u LEFT JOIN tenant_room r USING (tenant_id)
    ORDER BY held, CASE WHEN %(fair)s THEN u.turn END, u.next_run_at, random()
    LIMIT %(limit)s
),
-- Locked and updated by ctid. A row changed since this statement's snapshot is locked in
-- a version the update cannot see: it is left for the next claim, never claimed twice.
locked AS (
    SELECT j.ctid FROM jobs j JOIN candidates c ON j.ctid = c.ctid
    WHERE NOT c.held AND j.status = 'idle' AND j.next_run_at <= (SELECT due FROM clock)
      -- A regular slot of a job that is not `allow` waits while a backfill slot of it runs
      -- (migration 011): one probe of flights_pkey per candidate, none found as a rule.
      AND (j.overlap = 'allow' OR NOT EXISTS (
          SELECT 1 FROM flights f
          WHERE f.job_id = j.id AND f.status = 'running' AND f.origin = 'backfill'))
    FOR UPDATE OF j SKIP LOCKED
),
-- No index names a column this writes: a HOT update (migration 003, test_hot_claim.py).
-- The claim writes no run row; whatever ends the attempt does (record_run).
claimed AS (
    UPDATE jobs j SET
        status = 'running',
        locked_by = %(node_id)s,
        locked_at = greatest(k.t, j.next_run_at),
        locked_zone = %(zone)s,
        lease_expires_at = k.t + %(lease_s)s * interval '1s',
        lease_token = j.lease_token + 1,
        updated_at = k.t
    FROM locked l, clock k
    WHERE j.ctid = l.ctid
    -- In the order of cluster.store.records.ClaimedJob's fields: built by position. An empty
    -- payload comes back as NULL: no JSON to parse for most jobs.
    RETURNING j.id, j.tenant_id, j.name, j.schedule, j.tz, j.dst_repeated, j.dst_skipped,
              j.handler, nullif(j.payload, '{}'::jsonb) AS payload, j.shard_id, j.slot_at,
              j.attempt, j.lease_token, j.catch_up, j.grace_s, j.max_backfill, j.timeout_s,
              j.max_retries, j.retry_backoff_s, j.next_run_at, j.output_limit, j.overlap,
              j.cancel_grace_s, j.cancel_by, false AS flight, j.jitter_s
),
next_due AS (
    SELECT min(x.next_run_at) AS t
    FROM unnest(%(shards)s::int[]) AS s(shard)
    CROSS JOIN LATERAL (
        SELECT j.next_run_at FROM jobs j
        WHERE j.shard_id = s.shard AND j.status = 'idle'
          AND j.next_run_at > (SELECT due FROM clock)
          -- Not paused jobs:
          AND j.next_run_at < '9999-01-01Z'
        ORDER BY j.next_run_at
        LIMIT 1
    ) AS x
    WHERE (SELECT count(*) FROM locked) < %(limit)s
)
-- held: a due job was passed over (a tenant's limit, a row locked by another claim or a
-- tenant's place refused by tenant_take), for the claim loop's next claim to go fair.
SELECT k.t AS db_now, (SELECT t FROM next_due) AS next_due,
       (SELECT count(*) FROM candidates) > (SELECT count(*) FROM claimed) AS held, c.*
FROM clock k LEFT JOIN claimed c ON true
ORDER BY c.slot_at;

-- name: complete
-- Fenced, batched completion: rows still running under the caller's lease token move to
-- their next slot, record_run writes each attempt's run row, and the slots the catch-up
-- policy skipped are recorded. Returns the ids applied (tests/integration/test_history.py).
-- Alert events are written with the state they report (tests/integration/test_alert_events.py).
WITH clock AS (
    SELECT coalesce(%(now)s::timestamptz, now()) AS t
),
-- One JSON text per batch, cheap for the client to encode: per completion [id, token,
-- slot, outcome, error, duration_us, next_run_at, next_slot or null, next_attempt,
-- output as JSON text or null] (cluster.store.records.complete_params), parsed once.
input AS MATERIALIZED (
    SELECT (e->>0)::uuid AS id, (e->>1)::bigint AS token, (e->>2)::timestamptz AS slot,
           e->>3 AS outcome, e->>4 AS error, (e->>5)::bigint / 1e6::float8 AS duration_s,
           (e->>6)::timestamptz AS next_run_at,
           coalesce(e->>7, e->>6)::timestamptz AS next_slot,
           (e->>8)::int AS next_attempt, (e->>9)::jsonb AS output
    FROM json_array_elements(%(done)s::json) AS e
),
skip_in AS MATERIALIZED (
    SELECT (e->>0)::uuid AS job_id, (e->>1)::timestamptz AS slot, e->>2 AS reason
    FROM json_array_elements(%(skips)s::json) AS e
),
-- The ids are an index condition: the planner, whose statistics saw few running jobs,
-- must not scan the table for them (test_lease_plans.py). `o` is the job row before this
-- update: its attempt and claim time belong to the attempt that ended. `f`: the slot's last
-- attempt failed (`fail`), which makes N failed slots in a row and auto-pauses (`pause`);
-- the attempt started late (`late`: the late pass reports slots not started yet); `skips`
-- slots were skipped (one `skipped` event per catch-up).
done AS (
    UPDATE jobs j SET
        -- next_run_at 9999-01-01 (records.NEVER): a one-off job's slot has run for good.
        status = CASE WHEN i.next_run_at >= '9999-01-01Z'::timestamptz THEN 'done'
                      WHEN j.paused OR f.pause THEN 'paused' ELSE 'idle' END,
        next_run_at = CASE WHEN j.paused OR f.pause THEN '9999-01-01Z'::timestamptz
                           ELSE i.next_run_at END,
        slot_at = i.next_slot,
        attempt = i.next_attempt,
        -- A retry keeps its slot's origin; a slot reached past skipped ones is catch-up's.
        slot_origin = CASE WHEN i.next_slot = i.slot AND i.outcome <> 'skipped'
                                THEN o.slot_origin
                           WHEN f.skips > 0 THEN 'catch-up' END,
        last_run_at = CASE WHEN i.outcome = 'skipped' THEN j.last_run_at ELSE i.slot END,
        locked_by = NULL,
        locked_at = NULL,
        locked_zone = NULL,
        lease_expires_at = NULL,
        cancel_by = NULL,
        updated_at = k.t,
        failed_slots = CASE WHEN i.outcome = 'succeeded' THEN 0
                            ELSE j.failed_slots + f.fail::int END,
        paused = j.paused OR f.pause,
        pause_note = CASE WHEN f.pause THEN 'paused after ' || j.failed_slots + 1
            || ' failed slots in a row; last error: ' || coalesce(left(i.error, 300), '-')
            ELSE j.pause_note END,
        late_slot = CASE WHEN f.late THEN i.slot ELSE j.late_slot END
    FROM input i JOIN jobs o ON o.id = i.id
    CROSS JOIN LATERAL (
        SELECT x.*, x.fail AND NOT o.paused
                    AND coalesce(o.failed_slots + 1 >= o.pause_after_failures, false) AS pause
        FROM (SELECT i.outcome IN ('failed', 'timed_out') AND i.next_attempt <= o.attempt AS fail,
                     i.outcome <> 'skipped' AND o.late_slot IS DISTINCT FROM i.slot
                         AND o.locked_at > o.next_run_at + make_interval(secs => o.late_after_s)
                         AS late,
                     (i.outcome = 'skipped')::int + (SELECT count(*) FROM skip_in s
                         WHERE s.job_id = i.id AND s.slot <> i.slot) AS skips,
                     (SELECT min(s.slot) FROM skip_in s WHERE s.job_id = i.id) AS first_skip
             ) AS x
    ) AS f, clock k
    WHERE j.id = ANY(ARRAY(SELECT x.id FROM input x))
      AND j.id = i.id AND j.lease_token = i.token AND j.status = 'running'
    RETURNING j.id, j.tenant_id, j.name, i.slot,
              record_run(j.id, j.tenant_id, j.name, i.slot, o.attempt, %(node_id)s, %(zone)s,
                         i.outcome, i.token,
                         CASE WHEN i.outcome = 'skipped' THEN NULL ELSE o.locked_at END,
                         k.t, i.duration_s, i.error, i.output, o.slot_origin),
              CASE WHEN f.late THEN raise_alert('late', j.id, j.tenant_id, j.name, i.slot,
                  o.attempt, %(node_id)s, %(zone)s, NULL, 'started '
                  || round(extract(epoch FROM o.locked_at - o.next_run_at))
                  || 's after it was due (late after ' || o.late_after_s || 's)') END,
              CASE WHEN f.fail THEN raise_alert('failed', j.id, j.tenant_id, j.name, i.slot,
                  o.attempt, %(node_id)s, %(zone)s, i.error, NULL) END,
              CASE WHEN i.outcome = 'succeeded' AND o.failed_slots > 0 THEN raise_alert(
                  'recovered', j.id, j.tenant_id, j.name, i.slot, o.attempt, %(node_id)s,
                  %(zone)s, NULL, 'succeeded after ' || o.failed_slots || ' failed slots')
              END,
              CASE WHEN f.skips > 0 THEN raise_alert('skipped', j.id, j.tenant_id, j.name,
                  least(f.first_skip, CASE WHEN i.outcome = 'skipped' THEN i.slot END),
                  NULL, %(node_id)s, %(zone)s, NULL,
                  f.skips || CASE WHEN f.skips = 1 THEN ' slot' ELSE ' slots' END
                  || ' skipped by catch-up ' || o.catch_up) END,
              CASE WHEN f.pause THEN raise_alert('paused', j.id, j.tenant_id, j.name, i.slot,
                  o.attempt, %(node_id)s, %(zone)s, i.error, j.pause_note) END
),
skipped AS (
    -- Never the completed slot itself: one statement cannot write a run row twice.
    INSERT INTO runs (job_id, tenant_id, job_name, scheduled_for, attempt, node_id, zone,
                      status, finished_at, last_error)
    SELECT d.id, d.tenant_id, d.name, s.slot, 1, %(node_id)s, %(zone)s, 'skipped', k.t,
           s.reason
    FROM skip_in s
    JOIN done d ON d.id = s.job_id AND d.slot <> s.slot
    CROSS JOIN clock k
    ON CONFLICT (job_id, scheduled_for) DO NOTHING
)
SELECT id FROM done;

-- name: remove_done_jobs
-- Deletes the given jobs that are done and asked to be removed then (`--remove-when-done`),
-- right after the completion that made them done; the pruner removes any this missed.
DELETE FROM jobs
WHERE id = ANY(%(ids)s::uuid[]) AND status = 'done' AND remove_when_done
RETURNING id;

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

-- name: renew
-- Extends the leases of the caller's running jobs; returns the ids still held, each with
-- who asked to cancel it, if anyone did. The ids are an index condition, as in `complete`
-- (test_lease_plans.py).
UPDATE jobs j SET lease_expires_at = k.t + make_interval(secs => %(lease_s)s)
FROM unnest(%(ids)s::uuid[], %(tokens)s::bigint[]) AS i(id, token),
     (SELECT coalesce(%(now)s::timestamptz, now()) AS t) AS k
WHERE j.id = ANY(%(ids)s::uuid[])
  AND j.id = i.id AND j.lease_token = i.token AND j.status = 'running'
RETURNING j.id, j.cancel_by;

-- name: release
-- Hands running jobs back for another attempt of the same slot, due at once (a node
-- shutting down), recording the attempt as lost; fenced and read by id like `complete`
-- (test_history.py, test_lease_plans.py).
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
    RETURNING j.id,
              record_run(j.id, j.tenant_id, j.name, j.slot_at, o.attempt, o.locked_by,
                         o.locked_zone, 'lost', i.token, o.locked_at, k.t, NULL,
                         %(reason)s, NULL)
)
SELECT id FROM freed;

-- name: held_runs
-- Every job and flight running under this node id, with its lease token (slot NULL: a
-- job's claim). After its lock session was lost, a node compares them with the runs it
-- tracks: a claim whose answer was lost with the session ran, and left its row running
-- under the node with nobody to run it (node/maintenance/recovery.py, test_lost_answers.py). Read
-- after a reconnect only, so no index serves it.
SELECT j.id, NULL::timestamptz AS slot, j.lease_token FROM jobs j
WHERE j.status = 'running' AND j.locked_by = %(node_id)s
UNION ALL
SELECT f.job_id, f.slot, f.lease_token FROM flights f
WHERE f.status = 'running' AND f.locked_by = %(node_id)s;

-- name: recover
-- Takes back the slots of runs whose owner is dead (neither live nor connected) or whose
-- lease expired; with %(own)s, those this node id left running before a restart. Each is
-- due again at once as its next attempt; the lost one is recorded (test_session.py) and
-- raises `lost`. A lost attempt counts against the retries: a slot whose last attempt was
-- lost (`poison`) is handed to the caller instead, which records it failed and moves the
-- job on, so a job that kills its node kills at most retries + 1 (test_poison.py). So is a
-- slot someone asked to cancel: it is recorded cancelled, never run again.
WITH clock AS (
    SELECT coalesce(%(now)s::timestamptz, now()) AS t
),
sessions AS (
    SELECT DISTINCT application_name AS node_id FROM pg_stat_activity
    WHERE application_name <> '' AND datname = current_database()
),
-- A locking probe of the due index per shard (a running job was due by its claim), kept
-- as such by the planner because it locks (test_lease_plans.py). %(own)s is a constant
-- when planned: only its branch is read.
dead AS (
    SELECT d.* FROM unnest(%(shards)s::int[]) AS s(shard)
    CROSS JOIN LATERAL (
        SELECT j.ctid, j.id, j.lease_token, j.attempt, j.locked_by, j.locked_zone, j.locked_at,
               CASE WHEN j.lease_expires_at < k.t THEN 'lease expired'
                    ELSE 'owner gone' END AS reason,
               j.attempt > j.max_retries OR j.cancel_by IS NOT NULL AS poison
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
               'previous process gone' AS reason,
               j.attempt > j.max_retries OR j.cancel_by IS NOT NULL AS poison
        FROM jobs j
        WHERE %(own)s AND j.status = 'running' AND j.locked_by = %(node_id)s
        FOR UPDATE OF j SKIP LOCKED
    ) AS o
),
-- A poison slot stays running, under the caller and a new token, with its lost attempt's
-- number and start, for the caller's completion to record.
reset AS (
    UPDATE jobs j SET
        status = CASE WHEN d.poison THEN 'running' WHEN j.paused THEN 'paused' ELSE 'idle' END,
        next_run_at = CASE WHEN d.poison THEN j.next_run_at
                           WHEN j.paused THEN '9999-01-01Z'::timestamptz ELSE k.t END,
        attempt = j.attempt + (NOT d.poison)::int,
        locked_by = CASE WHEN d.poison THEN %(node_id)s END,
        locked_at = CASE WHEN d.poison THEN d.locked_at END,
        locked_zone = CASE WHEN d.poison THEN %(zone)s END,
        lease_expires_at = CASE WHEN d.poison THEN k.t + make_interval(secs => %(lease_s)s) END,
        lease_token = j.lease_token + 1,
        updated_at = k.t
    FROM dead d, clock k
    -- The rows are locked, so their ctids hold; looked up as a list, so the update reads
    -- them alone however few jobs the table has.
    WHERE j.ctid = ANY(ARRAY(SELECT ctid FROM dead))
      AND j.id = d.id AND j.lease_token = d.lease_token AND j.status = 'running'
    RETURNING j.id, j.tenant_id, j.name, j.slot_at, j.attempt, d.locked_by, d.reason, d.poison,
              j.schedule, j.tz, j.dst_repeated, j.dst_skipped, j.handler, j.payload, j.shard_id,
              j.lease_token, j.catch_up, j.grace_s, j.max_backfill, j.timeout_s, j.max_retries,
              j.retry_backoff_s, j.next_run_at, j.output_limit, j.overlap, j.cancel_grace_s,
              j.cancel_by, j.jitter_s,
              record_run(j.id, j.tenant_id, j.name, j.slot_at, d.attempt, d.locked_by,
                         d.locked_zone, 'lost', d.lease_token, d.locked_at, k.t, NULL,
                         d.reason || ' (node ' || coalesce(d.locked_by, '?') || ')', NULL),
              raise_alert('lost', j.id, j.tenant_id, j.name, j.slot_at, d.attempt, d.locked_by,
                          d.locked_zone, NULL,
                          d.reason || ' (node ' || coalesce(d.locked_by, '?') || ')')
)
SELECT r.id, r.tenant_id, r.name, r.slot_at, r.attempt, r.locked_by, r.reason, r.poison,
       r.schedule, r.tz, r.dst_repeated, r.dst_skipped, r.handler, r.payload, r.shard_id,
       r.lease_token, r.catch_up, r.grace_s, r.max_backfill, r.timeout_s, r.max_retries,
       r.retry_backoff_s, r.next_run_at, r.output_limit, r.overlap, r.cancel_grace_s,
       r.cancel_by, r.jitter_s
FROM reset r;

-- flights
-- The slots of overlap `allow` jobs, each under a lease of its own (migration 009,
-- docs/design/overlap.md, tests/integration/test_flights.py).

-- name: spawn
-- Hands claimed slots of `allow` jobs to flights, fenced on the claim's token like
-- `complete`. A job with fewer than max_concurrent flights gets one for its slot, running
-- at once under the caller and a lease of its own (first token: the claim's), and moves on
-- to its next slot; a job at its limit keeps its slot, due again in a second, and so waits
-- for a free place. Returns each job moved and whether its slot got a flight (`room`).
-- A claim whose flight already runs under the caller with the claim's token was handed
-- over by an earlier try of this write, whose answer was lost with its connection: it
-- comes back as moved with room again (`again`), so the retry runs the flight rather than
-- leave it to its lease (test_lost_answers.py).
WITH clock AS (
    SELECT coalesce(%(now)s::timestamptz, now()) AS t
),
-- Per claim: [id, token, slot, next_run_at, next_slot].
input AS MATERIALIZED (
    SELECT (e->>0)::uuid AS id, (e->>1)::bigint AS token, (e->>2)::timestamptz AS slot,
           (e->>3)::timestamptz AS next_run_at, (e->>4)::timestamptz AS next_slot
    FROM json_array_elements(%(spawns)s::json) AS e
),
skip_in AS MATERIALIZED (
    SELECT (e->>0)::uuid AS job_id, (e->>1)::timestamptz AS slot, e->>2 AS reason
    FROM json_array_elements(%(skips)s::json) AS e
),
claimed AS MATERIALIZED (
    SELECT j.id, j.tenant_id, j.name, j.shard_id, j.attempt, j.locked_at, i.token, i.slot,
           i.next_run_at, i.next_slot, j.slot_origin,
           -- Backfill flights (migration 011) never take a regular slot's place.
           (SELECT count(*) FROM flights f WHERE f.job_id = j.id
                AND f.origin IS DISTINCT FROM 'backfill') < j.max_concurrent AS room
    FROM jobs j JOIN input i ON i.id = j.id
    WHERE j.id = ANY(ARRAY(SELECT x.id FROM input x))
      AND j.lease_token = i.token AND j.status = 'running'
    FOR UPDATE OF j
),
flown AS (
    INSERT INTO flights (job_id, slot, shard_id, status, attempt, due_at, lease_token,
                         locked_by, locked_zone, locked_at, lease_expires_at, origin)
    SELECT c.id, c.slot, c.shard_id, 'running', c.attempt, c.slot, c.token, %(node_id)s,
           %(zone)s, c.locked_at, k.t + make_interval(secs => %(lease_s)s), c.slot_origin
    FROM claimed c CROSS JOIN clock k
    WHERE c.room
    ON CONFLICT (job_id, slot) DO NOTHING
),
skipped AS (
    INSERT INTO runs (job_id, tenant_id, job_name, scheduled_for, attempt, node_id, zone,
                      status, finished_at, last_error)
    SELECT c.id, c.tenant_id, c.name, s.slot, 1, %(node_id)s, %(zone)s, 'skipped', k.t,
           s.reason
    FROM skip_in s JOIN claimed c ON c.id = s.job_id AND c.room AND s.slot <> c.slot
    CROSS JOIN clock k
    ON CONFLICT (job_id, scheduled_for) DO NOTHING
),
moved AS (
    UPDATE jobs j SET
        status = CASE WHEN j.paused THEN 'paused' ELSE 'idle' END,
        next_run_at = CASE WHEN j.paused THEN '9999-01-01Z'::timestamptz
                           WHEN c.room THEN c.next_run_at
                           ELSE k.t + interval '1 second' END,
        slot_at = CASE WHEN c.room THEN c.next_slot ELSE j.slot_at END,
        attempt = CASE WHEN c.room THEN 1 ELSE j.attempt END,
        slot_origin = CASE WHEN c.room THEN NULL ELSE j.slot_origin END,
        last_run_at = CASE WHEN c.room THEN c.slot ELSE j.last_run_at END,
        locked_by = NULL,
        locked_at = NULL,
        locked_zone = NULL,
        lease_expires_at = NULL,
        cancel_by = NULL,
        updated_at = k.t
    FROM claimed c CROSS JOIN clock k
    WHERE j.id = c.id
    RETURNING j.id, c.room
),
again AS (
    SELECT i.id, true AS room FROM input i
    JOIN flights f ON f.job_id = i.id AND f.slot = i.slot AND f.lease_token = i.token
    WHERE f.status = 'running' AND f.locked_by = %(node_id)s
      AND i.id NOT IN (SELECT c.id FROM claimed c)
)
SELECT id, room FROM moved
UNION ALL
SELECT id, room FROM again;

-- name: claim_flights
-- Queued flights of the held shards that are due (a retry's backoff is over, or the flight
-- was taken back from a dead node), oldest first, at most %(limit)s: running under the
-- caller and a new token. Rows as `claim` returns them (cluster.store.records.ClaimedJob).
WITH clock AS (
    SELECT coalesce(%(now)s::timestamptz, now()) AS t
),
picked AS (
    SELECT p.ctid FROM unnest(%(shards)s::int[]) AS s(shard)
    CROSS JOIN LATERAL (
        SELECT f.ctid FROM flights f
        WHERE f.shard_id = s.shard AND f.status = 'queued'
          AND f.due_at <= (SELECT t FROM clock)
          -- A flight of a tenant at its limit is passed over, so it never hides the flights
          -- of other tenants (migration 014; the place trigger has the last word).
          AND (f.limit_tenant IS NULL OR EXISTS (
              SELECT 1 FROM tenant_room r WHERE r.tenant_id = f.limit_tenant AND r.room > 0))
          -- A backfill slot of a job that is not `allow` waits while its regular slot runs.
          AND (f.origin IS DISTINCT FROM 'backfill' OR NOT EXISTS (
              SELECT 1 FROM jobs x
              WHERE x.id = f.job_id AND x.status = 'running' AND x.overlap <> 'allow'))
        ORDER BY f.due_at
        LIMIT %(limit)s
        FOR UPDATE OF f SKIP LOCKED
    ) AS p
    LIMIT %(limit)s
)
UPDATE flights f SET
    status = 'running',
    locked_by = %(node_id)s,
    locked_zone = %(zone)s,
    locked_at = k.t,
    lease_expires_at = k.t + make_interval(secs => %(lease_s)s),
    lease_token = f.lease_token + 1
FROM picked p, clock k, jobs j
WHERE f.ctid = p.ctid AND j.id = f.job_id
RETURNING j.id, j.tenant_id, j.name, j.schedule, j.tz, j.dst_repeated, j.dst_skipped,
          j.handler, nullif(j.payload, '{}'::jsonb) AS payload, j.shard_id, f.slot,
          f.attempt, f.lease_token, j.catch_up, j.grace_s, j.max_backfill, j.timeout_s,
          j.max_retries, j.retry_backoff_s, f.due_at, j.output_limit, j.overlap,
          j.cancel_grace_s, f.cancel_by, true AS flight, j.jitter_s;

-- name: complete_flights
-- Fenced completion of flights, one per ended attempt: the last attempt of a slot deletes
-- its flight, a failed one with retries left queues it again for its backoff. Each
-- attempt's run row is written as by `complete`, and a slot that failed for good raises
-- `failed`. Returns the (job id, slot) pairs applied; the rest were fenced.
WITH clock AS (
    SELECT coalesce(%(now)s::timestamptz, now()) AS t
),
-- Per attempt: [job id, slot, token, outcome, error, duration_us, retry_at or null,
-- output as JSON text or null] (cluster.store.records.flight_params).
input AS MATERIALIZED (
    SELECT (e->>0)::uuid AS id, (e->>1)::timestamptz AS slot, (e->>2)::bigint AS token,
           e->>3 AS outcome, e->>4 AS error, (e->>5)::bigint / 1e6::float8 AS duration_s,
           (e->>6)::timestamptz AS retry_at, (e->>7)::jsonb AS output
    FROM json_array_elements(%(done)s::json) AS e
),
ended AS (
    DELETE FROM flights f USING input i, jobs j, clock k
    WHERE f.job_id = i.id AND f.slot = i.slot AND f.lease_token = i.token
      AND f.status = 'running' AND i.retry_at IS NULL AND j.id = f.job_id
    RETURNING f.job_id, f.slot,
              record_run(j.id, j.tenant_id, j.name, f.slot, f.attempt, %(node_id)s, %(zone)s,
                         i.outcome, i.token, f.locked_at, k.t, i.duration_s, i.error,
                         i.output, f.origin),
              CASE WHEN i.outcome IN ('failed', 'timed_out') THEN raise_alert('failed', j.id,
                  j.tenant_id, j.name, f.slot, f.attempt, %(node_id)s, %(zone)s, i.error,
                  NULL) END
),
retried AS (
    UPDATE flights f SET
        status = 'queued',
        attempt = f.attempt + 1,
        due_at = i.retry_at,
        locked_by = NULL,
        locked_zone = NULL,
        locked_at = NULL,
        lease_expires_at = NULL
    FROM input i JOIN flights o ON o.job_id = i.id AND o.slot = i.slot, jobs j, clock k
    WHERE f.job_id = i.id AND f.slot = i.slot AND f.lease_token = i.token
      AND f.status = 'running' AND i.retry_at IS NOT NULL AND j.id = f.job_id
    RETURNING f.job_id, f.slot,
              record_run(j.id, j.tenant_id, j.name, f.slot, o.attempt, %(node_id)s, %(zone)s,
                         i.outcome, i.token, o.locked_at, k.t, i.duration_s, i.error,
                         i.output, o.origin)
)
SELECT job_id, slot FROM ended
UNION ALL
SELECT job_id, slot FROM retried;

-- name: renew_flights
-- Extends the leases of the caller's running flights; returns those still held, each with
-- who asked to cancel it, if anyone did.
UPDATE flights f SET lease_expires_at = k.t + make_interval(secs => %(lease_s)s)
FROM unnest(%(ids)s::uuid[], %(slots)s::timestamptz[], %(tokens)s::bigint[])
         AS i(id, slot, token),
     (SELECT coalesce(%(now)s::timestamptz, now()) AS t) AS k
WHERE f.job_id = i.id AND f.slot = i.slot AND f.lease_token = i.token
  AND f.status = 'running'
RETURNING f.job_id, f.slot, f.cancel_by;

-- name: release_flights
-- Hands running flights back for another attempt, due at once (a node shutting down),
-- recording the attempt as lost; fenced like `complete_flights`.
WITH clock AS (
    SELECT coalesce(%(now)s::timestamptz, now()) AS t
)
UPDATE flights f SET
    status = 'queued',
    attempt = f.attempt + 1,
    due_at = k.t,
    locked_by = NULL,
    locked_zone = NULL,
    locked_at = NULL,
    lease_expires_at = NULL,
    lease_token = f.lease_token + 1
FROM unnest(%(ids)s::uuid[], %(slots)s::timestamptz[], %(tokens)s::bigint[])
         AS i(id, slot, token)
     JOIN flights o ON o.job_id = i.id AND o.slot = i.slot,
     jobs j, clock k
WHERE f.job_id = i.id AND f.slot = i.slot AND f.lease_token = i.token
  AND f.status = 'running' AND j.id = f.job_id
RETURNING f.job_id, f.slot,
          record_run(j.id, j.tenant_id, j.name, f.slot, o.attempt, o.locked_by,
                     o.locked_zone, 'lost', i.token, o.locked_at, k.t, NULL, %(reason)s,
                     NULL, o.origin);

-- name: recover_flights
-- Takes back the running flights of dead owners and expired leases in the held shards (as
-- `recover` does jobs; with %(own)s, those this node id left before a restart): queued
-- again, due at once, as the next attempt, the lost one recorded and raising `lost`. A
-- flight whose last allowed attempt was lost, or that was asked to cancel, is handed to
-- the caller (`poison`) to be recorded failed or cancelled, never run again. Rows as
-- `claim_flights` returns them, then poison, reason and the node that lost it.
WITH clock AS (
    SELECT coalesce(%(now)s::timestamptz, now()) AS t
),
sessions AS (
    SELECT DISTINCT application_name AS node_id FROM pg_stat_activity
    WHERE application_name <> '' AND datname = current_database()
),
dead AS (
    SELECT f.ctid, f.lease_token, f.attempt, f.locked_by, f.locked_zone, f.locked_at,
           CASE WHEN %(own)s THEN 'previous process gone'
                WHEN f.lease_expires_at < k.t THEN 'lease expired'
                ELSE 'owner gone' END AS reason,
           f.attempt > j.max_retries OR f.cancel_by IS NOT NULL AS poison
    FROM flights f JOIN jobs j ON j.id = f.job_id CROSS JOIN clock k
    WHERE f.status = 'running'
      AND CASE WHEN %(own)s THEN f.locked_by = %(node_id)s
               ELSE f.shard_id = ANY(%(shards)s::int[])
                    AND (f.lease_expires_at < k.t
                         OR (NOT (f.locked_by = ANY(%(live)s::text[]))
                             AND f.locked_by NOT IN (SELECT node_id FROM sessions))) END
    FOR UPDATE OF f SKIP LOCKED
)
UPDATE flights f SET
    status = CASE WHEN d.poison THEN 'running' ELSE 'queued' END,
    attempt = f.attempt + (NOT d.poison)::int,
    due_at = CASE WHEN d.poison THEN f.due_at ELSE k.t END,
    locked_by = CASE WHEN d.poison THEN %(node_id)s END,
    locked_zone = CASE WHEN d.poison THEN %(zone)s END,
    locked_at = CASE WHEN d.poison THEN d.locked_at END,
    lease_expires_at = CASE WHEN d.poison THEN k.t + make_interval(secs => %(lease_s)s) END,
    lease_token = f.lease_token + 1
FROM dead d, clock k, jobs j
WHERE f.ctid = d.ctid AND f.lease_token = d.lease_token AND j.id = f.job_id
RETURNING j.id, j.tenant_id, j.name, j.schedule, j.tz, j.dst_repeated, j.dst_skipped,
          j.handler, nullif(j.payload, '{}'::jsonb) AS payload, j.shard_id, f.slot,
          f.attempt, f.lease_token, j.catch_up, j.grace_s, j.max_backfill, j.timeout_s,
          j.max_retries, j.retry_backoff_s, f.due_at, j.output_limit, j.overlap,
          j.cancel_grace_s, f.cancel_by, true AS flight, j.jitter_s, d.poison, d.reason,
          d.locked_by,
          record_run(j.id, j.tenant_id, j.name, f.slot, d.attempt, d.locked_by,
                     d.locked_zone, 'lost', d.lease_token, d.locked_at, k.t, NULL,
                     d.reason || ' (node ' || coalesce(d.locked_by, '?') || ')', NULL,
                     f.origin),
          raise_alert('lost', j.id, j.tenant_id, j.name, f.slot, d.attempt, d.locked_by,
                      d.locked_zone, NULL,
                      d.reason || ' (node ' || coalesce(d.locked_by, '?') || ')');

-- name: cancel_flights
-- Asks whoever runs the job's flights to cancel them: the given slot, or every one running.
UPDATE flights f SET cancel_by = %(by)s
FROM jobs j
WHERE j.tenant_id = %(tenant_id)s AND j.name = %(name)s AND f.job_id = j.id
  AND (%(scope)s::text IS NULL OR j.tenant_id = %(scope)s)
  AND f.status = 'running' AND (%(slot)s::timestamptz IS NULL OR f.slot = %(slot)s)
RETURNING j.id, j.shard_id, f.slot AS slot_at, f.attempt, f.lease_token, f.locked_by,
          j.overlap;

-- name: live_sessions
-- The given node ids with a session in this database (a lock session is named after its
-- node); a namesake in another database is another cluster's node (test_session.py).
SELECT DISTINCT application_name AS node_id FROM pg_stat_activity
WHERE application_name = ANY(%(ids)s::text[]) AND datname = current_database();

-- status views
-- Read-only statements behind `pulse status`.

-- name: status_in_flight
-- Runs in flight per node: jobs and flights running under a lease, by the node that
-- claimed them (an `allow` job's row is running only while it hands its slot over).
SELECT x.node_id, count(*)::int AS runs
FROM (SELECT j.locked_by AS node_id FROM jobs j
      WHERE j.status = 'running' AND j.overlap <> 'allow'
      UNION ALL
      SELECT f.locked_by FROM flights f WHERE f.status = 'running') AS x
GROUP BY x.node_id
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

-- name: status_paused
-- Paused jobs with the note that says why (at most `limit`, the most recently paused first).
SELECT tenant_id, name, pause_note, count(*) OVER ()::int AS total
FROM jobs WHERE paused
ORDER BY updated_at DESC, tenant_id, name
LIMIT %(limit)s;

-- name: status_done
-- One-off jobs whose slot has run (status `done`), kept until their runs are pruned.
SELECT count(*)::int AS done FROM jobs WHERE status = 'done';

-- name: status_fire_lag
-- Fire lag (claim time minus slot time) of first attempts started within the window, from
-- run rows and job rows. Only slots of the last horizon, so the scan stays on runs_recent;
-- clock is NOT MATERIALIZED so the planner sees the window's bounds as constants.
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
-- Slots of the last horizon by the state of their latest attempt within the window: run
-- rows, and as 'running' the attempts in flight, which hide their slot's earlier outcome.
-- CTEs inlined as in status_fire_lag (tests/integration/test_history.py).
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

-- retention
-- Cluster config and pruning (cluster/config/retention.py, cluster/store/pruning.py,
-- docs/design/retention.md).

-- name: config_rows
SELECT key, value, updated_at FROM config ORDER BY key;

-- name: set_config
INSERT INTO config (key, value, updated_at) VALUES (%(key)s, %(value)s, now())
ON CONFLICT (key) DO UPDATE SET value = excluded.value, updated_at = excluded.updated_at
RETURNING key, value, updated_at;

-- name: seed_config
-- The defaults of keys not set yet; an operator's values stay.
INSERT INTO config (key, value)
SELECT k, v FROM unnest(%(keys)s::text[], %(values)s::text[]) AS c(k, v)
ON CONFLICT (key) DO NOTHING;

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

-- alerts
-- Rules, the outbox's deliveries and the late pass (cluster/store/alerts.py).

-- name: alert_rule_insert
INSERT INTO alert_rules (name, url, events, format, secret_env, tenant_id, job_name)
VALUES (%(name)s, %(url)s, %(events)s, %(format)s, %(secret_env)s, %(tenant_id)s,
        %(job_name)s)
ON CONFLICT (name) DO NOTHING
RETURNING name;

-- name: alert_scope_exists
-- Whether any job is in the scope a rule names (a tenant exists while it has a job).
SELECT EXISTS (
    SELECT 1 FROM jobs
    WHERE (%(tenant_id)s::text IS NULL OR tenant_id = %(tenant_id)s)
      AND (%(job_name)s::text IS NULL OR name = %(job_name)s)
) AS found;

-- name: alert_rules_list
SELECT * FROM alert_rules ORDER BY name;

-- name: alert_rule_get
SELECT * FROM alert_rules WHERE name = %(name)s;

-- name: alert_rule_remove
-- Its deliveries go with it (ON DELETE CASCADE): nobody would deliver them.
DELETE FROM alert_rules WHERE name = %(name)s RETURNING name;

-- name: alert_deliveries_list
SELECT d.id, d.rule_name, d.status, d.attempts, d.next_attempt_at, d.locked_by,
       d.last_error, d.delivered_at, d.created_at, e.id AS event_id, e.event, e.tenant_id,
       e.job_name, e.slot
FROM alert_deliveries d JOIN alert_events e ON e.id = d.event_id
WHERE (%(status)s::text IS NULL OR d.status = %(status)s)
ORDER BY d.id DESC
LIMIT %(limit)s;

-- name: claim_deliveries
-- Leases the oldest pending delivery of each (rule, job) that is due and not leased, at
-- most %(limit)s: a job's deliveries to one rule go out one at a time, in order, and one
-- that waits for a retry holds back the later ones (tests/integration/test_alert_delivery.py).
-- The attempt is counted here, so one lost with a killed node counts too.
WITH clock AS (
    SELECT coalesce(%(now)s::timestamptz, now()) AS t
),
heads AS (
    SELECT DISTINCT ON (d.rule_name, d.job_id) d.id
    FROM alert_deliveries d
    WHERE d.status = 'pending'
    ORDER BY d.rule_name, d.job_id, d.id
),
-- The conditions are on the locked row itself, so a row another node leased or finished
-- since this statement's snapshot is re-checked and left alone.
leased AS (
    SELECT d.id FROM alert_deliveries d
    WHERE d.id IN (SELECT h.id FROM heads h) AND d.status = 'pending'
      AND d.next_attempt_at <= (SELECT t FROM clock)
      AND (d.locked_until IS NULL OR d.locked_until < (SELECT t FROM clock))
    ORDER BY d.id
    LIMIT %(limit)s
    FOR UPDATE OF d SKIP LOCKED
),
claimed AS (
    UPDATE alert_deliveries d SET
        locked_by = %(node_id)s,
        locked_until = k.t + make_interval(secs => %(lease_s)s),
        attempts = d.attempts + 1
    FROM leased l, clock k
    WHERE d.id = l.id
    RETURNING d.id, d.event_id, d.rule_name, d.attempts
)
SELECT c.id AS delivery_id, c.attempts, c.rule_name, r.url, r.format, r.secret_env,
       (SELECT t FROM clock) AS db_now, e.*
FROM claimed c
JOIN alert_events e ON e.id = c.event_id
JOIN alert_rules r ON r.name = c.rule_name
ORDER BY c.id;

-- name: delivery_delivered
-- Fenced by the lease holder and its attempt: a node whose lease ran out and was taken
-- over changes nothing.
UPDATE alert_deliveries SET
    status = 'delivered',
    delivered_at = coalesce(%(now)s::timestamptz, now()),
    locked_by = NULL,
    locked_until = NULL,
    last_error = NULL
WHERE id = %(id)s AND status = 'pending' AND locked_by = %(node_id)s
  AND attempts = %(attempts)s
RETURNING status;

-- name: delivery_retry
-- Due again after %(delay_s)s, or failed for good once that would be past the event's
-- age limit; fenced like delivery_delivered.
UPDATE alert_deliveries d SET
    status = CASE
        WHEN k.t + make_interval(secs => %(delay_s)s)
             > e.created_at + make_interval(secs => %(max_age_s)s)
        THEN 'failed' ELSE 'pending' END,
    next_attempt_at = k.t + make_interval(secs => %(delay_s)s),
    last_error = %(error)s,
    locked_by = NULL,
    locked_until = NULL
FROM alert_events e, (SELECT coalesce(%(now)s::timestamptz, now()) AS t) AS k
WHERE d.id = %(id)s AND e.id = d.event_id AND d.status = 'pending'
  AND d.locked_by = %(node_id)s AND d.attempts = %(attempts)s
RETURNING d.status;

-- name: late_pass
-- Marks every idle slot, in all shards, not started within its job's late_after_s of its
-- due time, and raises its `late` event in the same statement (a slot that started late is
-- reported by `complete`). late_slot makes it once per slot: a row another node's pass
-- holds is skipped, and one it marked meanwhile fails the re-check on the locked row
-- (tests/integration/test_late.py). One probe of the due index per shard.
WITH clock AS (
    SELECT coalesce(%(now)s::timestamptz, now()) AS t
),
late AS (
    -- The default shards and those of every zone space (migration 012).
    SELECT c.ctid FROM (
        SELECT generate_series(0, %(shards)s - 1)
        UNION ALL
        SELECT generate_series(z.first_shard, z.first_shard + 15) FROM zone_spaces z
    ) AS s(shard)
    CROSS JOIN LATERAL (
        SELECT j.ctid FROM jobs j
        WHERE j.shard_id = s.shard AND j.next_run_at < (SELECT t FROM clock)
          AND j.status = 'idle' AND j.late_slot IS DISTINCT FROM j.slot_at
          AND j.next_run_at + make_interval(secs => j.late_after_s) < (SELECT t FROM clock)
        FOR UPDATE OF j SKIP LOCKED
    ) AS c
),
marked AS (
    UPDATE jobs j SET late_slot = j.slot_at
    FROM clock k
    WHERE j.ctid = ANY(ARRAY(SELECT ctid FROM late))
    RETURNING j.id, j.tenant_id, j.name, j.slot_at,
              extract(epoch FROM k.t - j.next_run_at)::float8 AS late_s,
              raise_alert('late', j.id, j.tenant_id, j.name, j.slot_at, j.attempt, NULL, NULL,
                          NULL, 'not started ' || round(extract(epoch FROM k.t - j.next_run_at))
                          || 's after it was due (late after ' || j.late_after_s || 's)')
)
SELECT id, tenant_id, name, slot_at, late_s FROM marked;

-- name: lock_job_sync
-- Held until the syncing transaction ends: nodes started together sync jobs in turn.
SELECT pg_advisory_xact_lock(hashtext('pulse.sync-jobs'), hashtext(%(schema)s));

-- web
-- API tokens, the audit trail and the pages the HTTP API reads (cluster/web/,
-- docs/design/web.md). A tenant-scoped token's reads and writes carry %(scope)s, so the
-- tenant scope is enforced by the statement itself.

-- name: token_insert
INSERT INTO api_tokens (name, role, tenant_id, hash, expires_at)
VALUES (%(name)s, %(role)s, %(tenant_id)s, %(hash)s,
        coalesce(%(now)s::timestamptz, now()) + make_interval(secs => %(expires_s)s))
ON CONFLICT (name) DO NOTHING
RETURNING name, role, tenant_id, created_at, expires_at, last_used_at;

-- name: token_list
SELECT name, role, tenant_id, created_at, expires_at, last_used_at
FROM api_tokens ORDER BY name;

-- name: token_revoke
DELETE FROM api_tokens WHERE name = %(name)s RETURNING name;

-- name: token_authenticate
-- The live token with this hash; its last use is stamped at most once a minute.
WITH t AS (
    SELECT name, role, tenant_id, last_used_at FROM api_tokens
    WHERE hash = %(hash)s AND (expires_at IS NULL OR expires_at > now())
), touched AS (
    UPDATE api_tokens a SET last_used_at = now()
    FROM t
    WHERE a.name = t.name
      AND (t.last_used_at IS NULL OR t.last_used_at < now() - interval '1 minute')
)
SELECT name, role, tenant_id FROM t;

-- name: audit_insert
INSERT INTO api_audit (token_name, action, tenant_id, job_name, source, detail)
VALUES (%(token_name)s, %(action)s, %(tenant_id)s, %(job_name)s, %(source)s, %(detail)s);

-- name: audit_list
SELECT id, at, token_name, action, tenant_id, job_name, source, detail
FROM api_audit
WHERE (%(scope)s::text IS NULL OR tenant_id = %(scope)s)
  AND (%(before)s::bigint IS NULL OR id < %(before)s)
ORDER BY id DESC
LIMIT %(limit)s;

-- name: jobs_page
-- One page of jobs by (tenant, name) after the cursor; q matches the name or the handler.
SELECT * FROM jobs
WHERE (%(scope)s::text IS NULL OR tenant_id = %(scope)s)
  AND (%(tenant_id)s::text IS NULL OR tenant_id = %(tenant_id)s)
  AND (%(status)s::text IS NULL OR status = %(status)s)
  AND (%(q)s::text IS NULL OR strpos(lower(name), lower(%(q)s)) > 0
       OR strpos(lower(handler), lower(%(q)s)) > 0)
  AND (%(after_tenant)s::text IS NULL
       OR (tenant_id, name) > (%(after_tenant)s::text, %(after_name)s::text))
ORDER BY tenant_id, name
LIMIT %(limit)s;

-- name: runs_page
-- One page of the run history, newest slot first, before the cursor (slot, id): run rows,
-- and the attempts in flight as 'running' (as list_runs reads them). Those are found as
-- recovery finds them, by a probe of the due index per shard (a running job was due by its
-- claim), not by reading every job (bench/web.py).
WITH live AS (
    SELECT r.id, j.id AS job_id, j.tenant_id, j.name AS job_name, j.slot_at AS scheduled_for,
           j.attempt, j.locked_by AS node_id, j.locked_zone AS zone, 'running'::text AS status,
           j.locked_at AS started_at, NULL::timestamptz AS finished_at,
           NULL::float8 AS duration_s, r.last_error,
           coalesce(j.slot_origin, 'schedule') AS origin
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
           coalesce(f.origin, 'schedule')
    FROM flights f
    JOIN jobs j ON j.id = f.job_id
    LEFT JOIN runs r ON r.job_id = f.job_id AND r.scheduled_for = f.slot
    WHERE f.status = 'running'
      AND (%(scope)s::text IS NULL OR j.tenant_id = %(scope)s)
      AND (%(job_name)s::text IS NULL OR j.name = %(job_name)s)
      AND (%(tenant_id)s::text IS NULL OR j.tenant_id = %(tenant_id)s)
)
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
            coalesce(r.origin, 'schedule')
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
LIMIT %(limit)s;

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
GROUP BY 1
ORDER BY 1;

-- zone placement (docs/design/zones.md)

-- name: zone_space
-- The space number of a zone set, allocated on first use. A concurrent first use of the
-- same set may leave this statement without a row; the caller asks again.
WITH new AS (
    INSERT INTO zone_spaces (zones) VALUES (%(zones)s::text[])
    ON CONFLICT (zones) DO NOTHING RETURNING space
)
SELECT space FROM new
UNION ALL
SELECT space FROM zone_spaces WHERE zones = %(zones)s::text[];

-- name: set_job_zones
-- Pins (or unpins) a job and moves it to the shard of its zone set; nothing if unchanged.
UPDATE jobs SET zones = %(zones)s::text[], shard_id = %(shard_id)s, updated_at = now()
WHERE tenant_id = %(tenant_id)s AND name = %(name)s
  AND (zones, shard_id) IS DISTINCT FROM (%(zones)s::text[], %(shard_id)s)
RETURNING id, shard_id;

-- name: zone_spaces
SELECT space, zones FROM zone_spaces ORDER BY space;

-- name: status_pinned
-- Jobs pinned to zones and the children of each-zone jobs, for `pulse status` (unplaced
-- ones make the cluster unhealthy); each-zone parents never run themselves.
SELECT tenant_id, name, zones, paused FROM jobs WHERE zones IS NOT NULL AND NOT each_zone
ORDER BY tenant_id, name;

-- name: park_each_zone
-- Makes the job an each-zone parent (runs only through its children): parked in a shard
-- no node locks, never due. Nothing if it already is.
UPDATE jobs SET each_zone = true, zones = %(zones)s::text[], shard_id = %(shard_id)s,
    next_run_at = '9999-01-01Z', updated_at = now()
WHERE tenant_id = %(tenant_id)s AND name = %(name)s
  AND (each_zone, zones, shard_id, next_run_at)
      IS DISTINCT FROM (true, %(zones)s::text[], %(shard_id)s, '9999-01-01Z'::timestamptz)
RETURNING id, shard_id;

-- name: unpark_each_zone
-- An each-zone parent made an ordinary job again: due at its next slot (its children are
-- removed by the nodes).
UPDATE jobs SET each_zone = false,
    next_run_at = CASE WHEN paused THEN next_run_at ELSE %(next_run_at)s END,
    slot_at = %(next_run_at)s, attempt = 1
WHERE tenant_id = %(tenant_id)s AND name = %(name)s AND each_zone;

-- name: each_zone_parents
-- Each-zone jobs that cover the zone (all zones when not restricted).
-- `fresh`: its child there is at least as new as it (nothing to write).
SELECT p.id, p.name, p.schedule, p.tz, p.dst_repeated, p.dst_skipped,
       EXISTS (SELECT 1 FROM jobs c
               WHERE c.parent_id = p.id AND c.zones = ARRAY[%(zone)s::text]
                 AND c.updated_at >= p.updated_at) AS fresh
FROM jobs p
WHERE p.each_zone AND (p.zones IS NULL OR %(zone)s = ANY(p.zones));

-- name: upsert_zone_child
-- The parent's child for one zone: created, or its definition brought in line with the
-- parent's. Its id, shard and run history stay; a timing change moves an idle child to
-- the new next slot, as `upsert_job` does.
INSERT INTO jobs AS j (
    id, tenant_id, name, schedule, tz, dst_repeated, dst_skipped, handler, payload,
    status, paused, shard_id, next_run_at, slot_at, catch_up, grace_s, max_backfill,
    timeout_s, max_retries, retry_backoff_s, keep_for_s, keep_runs, output_limit,
    late_after_s, pause_after_failures, overlap, max_concurrent, cancel_grace_s,
    zones, parent_id)
SELECT %(id)s, p.tenant_id, p.name || '@' || %(zone)s, p.schedule, p.tz, p.dst_repeated,
    p.dst_skipped, p.handler, p.payload, CASE WHEN p.paused THEN 'paused' ELSE 'idle' END,
    p.paused, %(shard_id)s,
    CASE WHEN p.paused THEN '9999-01-01Z'::timestamptz ELSE %(next_run_at)s END,
    %(next_run_at)s, p.catch_up, p.grace_s, p.max_backfill, p.timeout_s, p.max_retries,
    p.retry_backoff_s, p.keep_for_s, p.keep_runs, p.output_limit, p.late_after_s,
    p.pause_after_failures, p.overlap, p.max_concurrent, p.cancel_grace_s,
    ARRAY[%(zone)s::text], p.id
FROM jobs p WHERE p.id = %(parent_id)s AND p.each_zone
ON CONFLICT (tenant_id, name) DO UPDATE SET
    schedule = excluded.schedule, tz = excluded.tz, dst_repeated = excluded.dst_repeated,
    dst_skipped = excluded.dst_skipped, handler = excluded.handler,
    payload = excluded.payload, paused = excluded.paused, catch_up = excluded.catch_up,
    grace_s = excluded.grace_s, max_backfill = excluded.max_backfill,
    timeout_s = excluded.timeout_s, max_retries = excluded.max_retries,
    retry_backoff_s = excluded.retry_backoff_s, keep_for_s = excluded.keep_for_s,
    keep_runs = excluded.keep_runs, output_limit = excluded.output_limit,
    late_after_s = excluded.late_after_s, pause_after_failures = excluded.pause_after_failures,
    overlap = excluded.overlap, max_concurrent = excluded.max_concurrent,
    cancel_grace_s = excluded.cancel_grace_s,
    status = CASE WHEN j.status = 'running' THEN 'running'
                  WHEN excluded.paused THEN 'paused' ELSE 'idle' END,
    (next_run_at, slot_at, attempt) = (
        SELECT CASE WHEN m.moves OR (j.status <> 'running' AND excluded.paused)
                    THEN excluded.next_run_at ELSE j.next_run_at END,
               CASE WHEN m.moves THEN excluded.slot_at ELSE j.slot_at END,
               CASE WHEN m.moves THEN 1 ELSE j.attempt END
        FROM (SELECT j.status <> 'running' AND (
                  (j.schedule, j.tz, j.dst_repeated, j.dst_skipped)
                      IS DISTINCT FROM (excluded.schedule, excluded.tz, excluded.dst_repeated,
                                        excluded.dst_skipped)
                  OR (j.paused AND NOT excluded.paused)) AS moves) m),
    updated_at = now()
WHERE j.parent_id = excluded.parent_id
  AND (j.schedule, j.tz, j.dst_repeated, j.dst_skipped, j.handler, j.payload, j.paused,
       j.catch_up, j.grace_s, j.max_backfill, j.timeout_s, j.max_retries, j.retry_backoff_s,
       j.keep_for_s, j.keep_runs, j.output_limit, j.late_after_s, j.pause_after_failures,
       j.overlap, j.max_concurrent, j.cancel_grace_s)
    IS DISTINCT FROM
      (excluded.schedule, excluded.tz, excluded.dst_repeated, excluded.dst_skipped,
       excluded.handler, excluded.payload, excluded.paused, excluded.catch_up,
       excluded.grace_s, excluded.max_backfill, excluded.timeout_s, excluded.max_retries,
       excluded.retry_backoff_s, excluded.keep_for_s, excluded.keep_runs,
       excluded.output_limit, excluded.late_after_s, excluded.pause_after_failures,
       excluded.overlap, excluded.max_concurrent, excluded.cancel_grace_s)
RETURNING id, shard_id;

-- name: zone_children
-- Every child of an each-zone job: its zone and whether its parent still wants it.
SELECT c.id, c.zones[1] AS zone, c.status,
       (p.id IS NOT NULL AND p.each_zone
        AND (p.zones IS NULL OR c.zones[1] = ANY(p.zones))) AS wanted
FROM jobs c LEFT JOIN jobs p ON p.id = c.parent_id
WHERE c.parent_id IS NOT NULL;

-- name: remove_zone_children
-- Children of zones with no live node, or no longer wanted; a running one stays until
-- its run ends.
DELETE FROM jobs WHERE id = ANY(%(ids)s::uuid[]) AND parent_id IS NOT NULL
  AND status <> 'running'
RETURNING id, name;

-- name: backfill_insert
-- A backfill request (cluster/store/backfills.py): the nodes holding the job's shard queue
-- its slots as flights from cursor_at on.
INSERT INTO backfills (job_id, tenant_id, job_name, shard_id, range_from, range_to, cursor_at,
                       only_missing, max_parallel, slots_total)
VALUES (%(job_id)s, %(tenant_id)s, %(job_name)s, %(shard_id)s, %(range_from)s, %(range_to)s,
        %(range_from)s, %(only_missing)s, %(max_parallel)s, %(slots_total)s)
RETURNING *, 0 AS in_flight;

-- name: backfill_succeeded
-- Of the given slots of a job, those whose run succeeded (`--only-missing` leaves them out).
SELECT r.scheduled_for FROM runs r
WHERE r.job_id = %(job_id)s AND r.scheduled_for = ANY(%(slots)s::timestamptz[])
  AND r.status = 'succeeded';

-- name: backfill_list
SELECT b.*, (SELECT count(*) FROM flights f WHERE f.backfill_id = b.id)::int AS in_flight
FROM backfills b
WHERE (%(tenant_id)s::text IS NULL OR b.tenant_id = %(tenant_id)s)
  AND (%(scope)s::text IS NULL OR b.tenant_id = %(scope)s)
ORDER BY b.id;

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
       b.max_parallel, b.slots_total, b.slots_queued, b.created_at,
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
       j.schedule, j.tz, j.dst_repeated, j.dst_skipped, j.status AS job_status,
       (SELECT count(*) FROM flights f WHERE f.backfill_id = b.id)::int AS in_flight
FROM backfills b JOIN jobs j ON j.id = b.job_id
WHERE b.shard_id = ANY(%(shards)s::int[]) AND b.status = 'active'
ORDER BY b.id
FOR UPDATE OF b SKIP LOCKED;

-- name: backfill_queue
-- Queues the given slots of a backfill as flights (origin `backfill`) due now and moves its
-- cursor, in the caller's transaction. A slot already in flight, or whose regular run is
-- going on, is not queued again (one claim per slot). The request is done once its cursor
-- passed the range and none of its slots is in flight.
WITH clock AS (
    SELECT coalesce(%(now)s::timestamptz, now()) AS t
),
queued AS (
    INSERT INTO flights (job_id, slot, shard_id, status, attempt, due_at, lease_token, origin,
                         backfill_id)
    SELECT j.id, s.slot, j.shard_id, 'queued', 1, k.t, j.lease_token, 'backfill', %(id)s
    FROM unnest(%(slots)s::timestamptz[]) AS s(slot)
    JOIN jobs j ON j.id = %(job_id)s
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
