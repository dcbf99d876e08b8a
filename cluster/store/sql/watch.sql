-- Watch jobs: their ping tokens, the runs their pings write, the late pass over the watch
-- shard and adoption (cluster/store/housekeeping/watches.py, docs/design/watch.md).

-- name: watch_by_hash
-- The job a ping token names, locked so the pings of one job are taken one at a time.
-- No tenant: the token is the credential, and it names one job of one tenant.
SELECT * FROM jobs WHERE ping_hash = %(hash)s FOR UPDATE;

-- name: watch_end
-- An end ping for the run the job's open /start began: 'recorded', 'late' (noted on a run
-- that had timed out or was cancelled), or NULL (migration `0.2.0_pre_watch_timeouts`).
SELECT watch_end(%(hash)s, %(slot)s, %(kind)s, %(at)s, %(output)s, %(error)s) AS outcome;

-- name: watch_open
-- The slot a /start opened (an end ping closes it: NULL).
UPDATE jobs SET ping_open = %(slot)s WHERE id = %(id)s RETURNING id;

-- name: watch_record
SELECT watch_record(%(hash)s, %(slot)s, %(kind)s, %(started_at)s, %(finished_at)s,
                    %(output)s, %(error)s, %(late)s) AS outcome;

-- name: watch_advance
-- The job's awaited slot was pinged (or declared late): it waits for the next one. At the
-- adoption slot it becomes a job Pulse runs: out of the watch shard, due at that slot (the
-- notify channel is the settings' wake_channel, <schema>_wake).
UPDATE jobs SET
    next_run_at = %(next_start)s,
    slot_at = %(next_slot)s,
    attempt = 1,
    late_slot = CASE WHEN %(late)s THEN %(slot)s ELSE late_slot END,
    shard_id = CASE WHEN %(adopt)s THEN %(home_shard)s ELSE shard_id END,
    watch = watch AND NOT %(adopt)s,
    updated_at = coalesce(%(now)s::timestamptz, now())
WHERE id = %(id)s AND watch AND status = 'idle' AND slot_at = %(slot)s
-- An adopted job wakes the claim loops of its home shard, as a new job does.
RETURNING shard_id,
          CASE WHEN %(adopt)s THEN pg_notify(current_schema() || '_wake', %(home_shard)s::text)
          END AS woken;

-- name: watch_overdue
-- Watch jobs whose awaited slot had no ping within late_after_s, and adopted ones awaiting
-- a slot Pulse runs (moved past the adoption slot by a resume, a pause --until, skip-next
-- or a new timing), handed over as it comes: one probe of the due index in the watch
-- shard, rows another node's pass holds skipped.
SELECT * FROM jobs j
WHERE j.shard_id = %(watch_shard)s AND j.status = 'idle' AND j.watch
  AND j.next_run_at < coalesce(%(now)s::timestamptz, now())
  AND (j.next_run_at + make_interval(secs => j.late_after_s)
       < coalesce(%(now)s::timestamptz, now())
       OR j.slot_at >= j.adopt_at)
ORDER BY j.next_run_at
LIMIT %(limit)s
FOR UPDATE OF j SKIP LOCKED;

-- name: watch_slot_seen
SELECT EXISTS (SELECT 1 FROM runs WHERE job_id = %(id)s AND scheduled_for = %(slot)s) AS seen;

-- name: watch_missed
-- A watched slot no ping came for: a failed run in its history and its `late` event.
SELECT record_run(j.id, j.tenant_id, j.name, %(slot)s, 1, NULL, NULL, 'failed', NULL, NULL,
                  k.t, NULL, %(error)s, NULL, 'ping'),
       raise_alert('late', j.id, j.tenant_id, j.name, %(slot)s, 1, NULL, NULL, NULL,
                   %(error)s)
FROM jobs j, (SELECT coalesce(%(now)s::timestamptz, now()) AS t) AS k
WHERE j.id = %(id)s;

-- name: watch_declare_missed
-- An operator's action moves a watch job past awaited slots no ping came for within its
-- late_after_s: each is declared missed first, as watch_missed does (migration
-- `0.3.0_pre_zzzzzzzzzz_watch_missed_by_actions`; the owner's, for the web too).
SELECT missed_slot
FROM watch_declare_missed(%(id)s, %(scope)s, %(slots)s::timestamptz[], %(now)s::timestamptz);

-- name: watch_timeouts
-- Watch runs a /start opened whose end ping did not come within the job's timeout, each
-- recorded timed_out with its `failed` event by watch_time_out (migration `0.2.0_pre_watch_timeouts`): runs
-- another pass or an end ping holds are skipped, and the function re-checks the status
-- under the lock, so each is closed once. The probe: runs_by_status, whose `running` rows
-- are watched runs alone (a node's attempts in flight live on their job rows).
WITH clock AS (
    SELECT coalesce(%(now)s::timestamptz, now()) AS t
),
overdue AS MATERIALIZED (
    SELECT r.id, r.tenant_id, r.job_name, r.scheduled_for, r.started_at
    FROM runs r JOIN jobs j ON j.id = r.job_id
    WHERE r.status = 'running' AND r.origin = 'ping'
      AND r.started_at + make_interval(secs => j.timeout_s) < (SELECT t FROM clock)
    ORDER BY r.started_at
    LIMIT %(limit)s
    FOR UPDATE OF r SKIP LOCKED
)
SELECT o.tenant_id, o.job_name, o.scheduled_for AS slot
FROM overdue o
WHERE watch_time_out(o.id, (SELECT t FROM clock))
ORDER BY o.started_at;

-- name: watch_cancel
-- `pulse runs cancel` of a watch job's running runs (migration `0.2.0_pre_watch_timeouts`).
SELECT cancelled_slot AS slot
FROM watch_cancel(%(tenant_id)s, %(name)s, %(scope)s, %(slot)s, %(by)s)
ORDER BY cancelled_slot;

-- name: watch_set_token
-- Gives a watch job (or an adopted one) its ping token's hash: a first one, or with
-- %(rotate)s a new one in place of the old.
UPDATE jobs SET ping_hash = %(hash)s, updated_at = now()
WHERE tenant_id = %(tenant_id)s AND name = %(name)s
  AND (%(scope)s::text IS NULL OR tenant_id = %(scope)s)
  AND (watch OR adopt_at IS NOT NULL) AND (%(rotate)s OR ping_hash IS NULL)
RETURNING id;

-- name: watch_place
-- A new watch job moves to the watch shard, in the transaction that created it.
UPDATE jobs SET watch = true, shard_id = %(watch_shard)s
WHERE tenant_id = %(tenant_id)s AND name = %(name)s AND NOT watch AND adopt_at IS NULL
RETURNING id;

-- name: watch_adopt
-- `pulse jobs adopt`: from %(at)s on Pulse runs the job, with %(handler)s if given.
UPDATE jobs SET adopt_at = %(at)s, handler = coalesce(%(handler)s, handler), updated_at = now()
WHERE tenant_id = %(tenant_id)s AND name = %(name)s
  AND (%(scope)s::text IS NULL OR tenant_id = %(scope)s) AND watch
RETURNING id;

-- name: watch_doubles_list
SELECT d.slot, d.kind, d.pinged_at FROM watch_doubles d
WHERE d.job_id = %(id)s
ORDER BY d.slot, d.id;
