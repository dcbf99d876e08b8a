-- The node's lock session (cluster/store/lock/session.py, docs/design/lock-session.md): its
-- settings, the shard locks it holds, and which nodes have a session.

-- name: lock_session_setup
-- No JIT on the lock session: over many shards the claim's cost estimate crosses
-- jit_above_cost, and compiling costs far more than running it (test_session.py,
-- test_claim_plan.py). And the mark of a node that knows every-node jobs: a shared lock
-- on a key no shard, probe or life lock takes (lifelock.EACH_NODE_MARK); creating an
-- every-node job asks which lock sessions lack it (jobs.sql: nodes_without_each_node).
SELECT set_config('jit', 'off', false), pg_try_advisory_lock_shared(%(ns)s, %(mark)s);

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
-- Shards and the start-up probe (-pid, at least -2^22); not the life lock (below that).
SELECT objid::int AS shard FROM pg_locks
WHERE locktype = 'advisory' AND pid = pg_backend_pid() AND granted
  AND classid = %(ns)s::int::oid AND objsubid = 2 AND objid::int >= -4194304
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

-- name: member_sessions
-- The given node ids with a lock session in this database, and how long each has been
-- idle (0 while a statement runs): a frozen node's session idles while its heartbeat
-- goes stale (docs/design/recovery.md).
SELECT application_name AS node_id,
       max(CASE WHEN state = 'idle'
                THEN extract(epoch FROM clock_timestamp() - state_change) ELSE 0 END
       )::float8 AS idle_s
FROM pg_stat_activity
WHERE application_name = ANY(%(ids)s::text[]) AND datname = current_database()
GROUP BY application_name;

-- name: end_frozen_session
-- Ends ``node``'s lock session if it is still idle for longer than ``idle_s``: the node
-- stopped (its heartbeat is stale too) or its traffic stalls (it reports its statements
-- unanswered), and its shard locks must not wait for idle_session_timeout. Fencing
-- refuses whatever it writes when it wakes or its network heals. Its other connections'
-- open transactions end with it: one stopped between a fenced completion and its commit
-- (effects, docs/design/effects.md) holds the job row, which recovery must update.
-- `gone`: the node has no session left at all (it ended between the keeper's read and
-- this statement, say by another peer's hand), as the keeper must learn rather than keep
-- the member for what it read a moment ago.
WITH lock_session AS (
    SELECT count(*) FILTER (WHERE pg_terminate_backend(pid))::int AS ended
    FROM pg_stat_activity
    WHERE application_name = %(node)s AND datname = current_database() AND state = 'idle'
      AND state_change < clock_timestamp() - make_interval(secs => %(idle_s)s)
), open_transactions AS (
    SELECT count(*) FILTER (WHERE pg_terminate_backend(pid))::int AS ended
    FROM pg_stat_activity
    WHERE (SELECT ended FROM lock_session) > 0 AND datname = current_database()
      AND starts_with(application_name, %(node)s || '/')
      AND state IN ('idle in transaction', 'idle in transaction (aborted)')
)
SELECT l.ended, o.ended AS transactions,
       NOT EXISTS (SELECT 1 FROM pg_stat_activity
                   WHERE application_name = %(node)s AND datname = current_database()) AS gone
FROM lock_session l, open_transactions o;

-- name: take_life_lock
-- The node's life lock (cluster/store/lock/lifelock.py): held by its lock session while it
-- lives, so a peer waiting for it learns at once that the session ended.
SELECT pg_try_advisory_lock(%(ns)s, %(key)s) AS got;

-- name: await_life_lock
-- Granted only once the peer's lock session has ended, or fails at the lock_timeout.
SELECT pg_advisory_lock(%(ns)s, %(key)s);

-- name: release_life_lock
SELECT pg_advisory_unlock(%(ns)s, %(key)s);

-- name: life_watch_setup
SELECT set_config('lock_timeout', %(ms)s, false);
