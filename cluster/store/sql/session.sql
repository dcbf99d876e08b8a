-- The node's lock session (cluster/store/session.py, docs/design/lock-session.md): its
-- settings, the shard locks it holds, and which nodes have a session.

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

-- name: live_sessions
-- The given node ids with a session in this database (a lock session is named after its
-- node); a namesake in another database is another cluster's node (test_session.py).
SELECT DISTINCT application_name AS node_id FROM pg_stat_activity
WHERE application_name = ANY(%(ids)s::text[]) AND datname = current_database();
