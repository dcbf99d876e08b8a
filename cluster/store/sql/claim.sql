-- The single-lease path: the claim of due job rows, and the lease it gives (renewed,
-- released, recovered from a dead node), run on the lock session (cluster/store/lock/session.py,
-- docs/design/claim-plan.md, recovery.md). Overlap `allow` slots: flights.sql.

-- name: claim
-- The oldest jobs due by now + %(ahead_s)s in the held shards, at most %(limit)s, marked
-- running under a fresh lease token, and when the next job of these shards falls due.
-- With %(fair)s, across tenants in turn, oldest first within each. A tenant's places in
-- the claim go to its jobs with the highest priority first (docs/design/fairness.md).
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
    SELECT s.shard, c.id, c.next_run_at, c.ctid, c.tenant_id, c.priority, c.uses, c.late_after_s
    FROM unnest(%(shards)s::int[]) AS s(shard)
    CROSS JOIN LATERAL (
        SELECT j.id, j.next_run_at, j.ctid, j.tenant_id, j.priority, j.uses, j.late_after_s
        FROM jobs j
        WHERE j.shard_id = s.shard AND j.status = 'idle'
          AND j.next_run_at <= (SELECT due FROM clock)
        ORDER BY j.next_run_at
        LIMIT (SELECT %(quota)s::int)
    ) AS c
),
-- The named limits (0.3.0_pre_uses_named_limits) and whether each has room now, as this
-- snapshot sees them (no lock): read once per claim, and only if a candidate uses a key. A
-- full rate key reopens when the oldest start that fills its window leaves it, a period
-- after that start: the claim loop is told (next_due), and claims then.
key_room AS MATERIALIZED (
    SELECT l.scope, l.name,
           coalesce(r.room > 0, true) AND (l.rate IS NULL OR n.near < l.rate) AS open,
           CASE WHEN n.near >= l.rate THEN (
               SELECT s.t + make_interval(secs => l.per_s) FROM unnest(l.starts) AS s(t)
               WHERE s.t > c.t - make_interval(secs => l.per_s)
                 AND s.t < c.t + make_interval(secs => l.per_s)
               ORDER BY s.t OFFSET n.near - l.rate LIMIT 1) END AS reopens
    FROM limit_keys l JOIN limit_room r ON r.id = l.id CROSS JOIN clock c
    CROSS JOIN LATERAL (SELECT limit_starts_near(l, c.t) AS near) AS n
),
-- A job whose named limit has no room is passed over (`blocked`, below) but still among its
-- shard's oldest: a shard whose heads hold one is read again past such jobs, so a full key
-- hides none of its other due jobs (test_named_limit_waits.py). Only read when a head uses a
-- key; the reading past costs one row per waiting job of the shard, none is locked.
crowded AS (
    SELECT DISTINCT h.shard FROM heads h
    WHERE h.uses <> '{}' AND EXISTS (
        SELECT 1 FROM unnest(h.uses) AS n(name)
        WHERE NOT coalesce((SELECT k.open FROM key_room k
                            WHERE k.name = n.name AND k.scope IN ('', h.tenant_id)
                            ORDER BY k.scope DESC LIMIT 1), false))
),
-- The names of keys without room: `some` key of the name, or `every` key of it (a job that
-- names one of those is blocked whatever its tenant). Past the heads, a job is decided by
-- array overlaps; only a name shut for some tenants and open for others is looked up.
key_shut AS MATERIALIZED (
    SELECT coalesce(array_agg(n.name) FILTER (WHERE n.some), '{}') AS some,
           coalesce(array_agg(n.name) FILTER (WHERE n.every), '{}') AS every
    FROM (SELECT k.name, bool_or(NOT k.open) AS some, bool_and(NOT k.open) AS every
          FROM key_room k GROUP BY k.name) AS n
),
past AS (
    SELECT c.id, c.next_run_at, c.ctid, c.tenant_id, c.priority, c.uses, c.late_after_s
    FROM crowded s
    CROSS JOIN LATERAL (
        SELECT j.id, j.next_run_at, j.ctid, j.tenant_id, j.priority, j.uses, j.late_after_s
        FROM jobs j
        WHERE j.shard_id = s.shard AND j.status = 'idle'
          AND j.next_run_at <= (SELECT due FROM clock)
          AND (j.uses = '{}' OR NOT (j.uses && (SELECT x.some FROM key_shut x))
               OR (NOT (j.uses && (SELECT x.every FROM key_shut x)) AND NOT EXISTS (
                   SELECT 1 FROM unnest(j.uses) AS n(name)
                   WHERE NOT coalesce((SELECT k.open FROM key_room k
                                       WHERE k.name = n.name AND k.scope IN ('', j.tenant_id)
                                       ORDER BY k.scope DESC LIMIT 1), false))))
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
    SELECT c.id, c.next_run_at, c.ctid, c.tenant_id, c.priority, c.uses, c.late_after_s
    FROM (SELECT h.shard FROM heads h GROUP BY h.shard
          HAVING count(*) >= %(quota)s
             AND max(h.next_run_at) < (SELECT t FROM cutoff)) AS s
    CROSS JOIN LATERAL (
        SELECT j.id, j.next_run_at, j.ctid, j.tenant_id, j.priority, j.uses, j.late_after_s
        FROM jobs j
        WHERE j.shard_id = s.shard AND j.status = 'idle'
          AND j.next_run_at <= (SELECT due FROM clock)
          AND j.next_run_at < (SELECT t FROM cutoff)
        ORDER BY j.next_run_at
        LIMIT %(limit)s
    ) AS c
),
-- Fair fan-out, asked for by a node whose last claim was full (node/pipeline/claimer.py): the
-- tenants with jobs in each held shard and each one's oldest due time there, as the lock
-- session's tenant list last found them (fair_tenants, below; cluster/store/lock/
-- tenantlist.py); those with a job due there; then each such tenant's oldest due jobs in
-- the shard, as many as its turns in this claim can take.
pairs AS (
    SELECT p.shard, p.tenant, count(*) OVER (PARTITION BY p.tenant) AS spread,
           row_number() OVER (PARTITION BY p.tenant ORDER BY random()) AS pick
    FROM unnest(%(pair_shards)s::int[], %(pair_tenants)s::text[],
                %(pair_oldest)s::timestamptz[]) AS p(shard, tenant, oldest)
    WHERE %(fair)s AND p.oldest <= (SELECT due FROM clock)
),
-- Each tenant's share of this claim (limit / tenants), read evenly from at most share + 1
-- of its shards picked by lot: a tenant spread over many shards costs what its turns can
-- take, not a read in every shard (its oldest there are among the heads anyway).
turns AS (
    SELECT ceil(%(limit)s::float8 / nullif(count(DISTINCT tenant), 0))::int AS share FROM pairs
),
fair AS (
    SELECT c.id, c.next_run_at, c.ctid, c.tenant_id, c.priority, c.uses, c.late_after_s
    FROM pairs p CROSS JOIN turns s
    CROSS JOIN LATERAL (
        SELECT j.id, j.next_run_at, j.ctid, j.tenant_id, j.priority, j.uses, j.late_after_s
        FROM jobs j
        WHERE j.shard_id = p.shard AND j.tenant_id = p.tenant AND j.status = 'idle'
          AND j.next_run_at <= (SELECT due FROM clock)
        ORDER BY j.next_run_at
        LIMIT ceil(s.share::float8 / least(p.spread, s.share + 1))::int + 1
    ) AS c
    WHERE p.pick <= s.share + 1
),
-- Jobs with a priority (migration 0.3.0_pre_within_tenant_priority), which need not be
-- among the oldest: in each held shard, each priority present, highest first (a loose scan
-- of jobs_priority_due: the first entry below the last priority is the next one), then the
-- oldest due jobs of each. Skipped by one probe when no job has a priority.
levels AS (
    SELECT s.shard, f.priority
    FROM unnest(%(shards)s::int[]) AS s(shard)
    CROSS JOIN LATERAL (
        SELECT j.priority FROM jobs j
        WHERE j.shard_id = s.shard AND j.priority > 0
        ORDER BY j.priority DESC
        LIMIT 1
    ) AS f
    WHERE EXISTS (SELECT 1 FROM jobs j WHERE j.priority > 0)
    UNION ALL
    SELECT v.shard, f.priority
    FROM levels v
    CROSS JOIN LATERAL (
        SELECT j.priority FROM jobs j
        WHERE j.shard_id = v.shard AND j.priority > 0 AND j.priority < v.priority
        ORDER BY j.priority DESC
        LIMIT 1
    ) AS f
),
urgent AS (
    SELECT c.id, c.next_run_at, c.ctid, c.tenant_id, c.priority, c.uses, c.late_after_s
    FROM levels v
    CROSS JOIN LATERAL (
        SELECT j.id, j.next_run_at, j.ctid, j.tenant_id, j.priority, j.uses, j.late_after_s
        FROM jobs j
        WHERE j.shard_id = v.shard AND j.priority = v.priority AND j.priority > 0
          AND j.status = 'idle' AND j.next_run_at <= (SELECT due FROM clock)
        ORDER BY j.next_run_at
        LIMIT %(limit)s
    ) AS c
),
-- Each candidate, `blocked` if it uses a named limit with no room (the first such key, the
-- tenant's own before a cluster-wide one of its name; a name without a key blocks too).
-- A tenant's places in the claim are its unblocked candidates' due times, oldest first; its
-- jobs take them highest priority first, then oldest first (`turn`, blocked ones last): the
-- n-th of the one order takes the n-th of the other (`place`). A tenant with no candidate of
-- a priority (`top` 0) keeps its own due times: no second ranking is read for it.
ranked AS (
    SELECT y.*, row_number() OVER w AS turn,
           max(y.priority) OVER (PARTITION BY y.tenant_id) AS top
    FROM (
        SELECT x.*,
               -- A slot past its --late-after ranks ahead of every priority, oldest first:
               -- a lower priority waits at most that long behind its tenant's higher ones.
               CASE WHEN x.next_run_at + make_interval(secs => x.late_after_s)
                         < (SELECT t FROM clock)
                    THEN 101 ELSE x.priority END AS rank,
               CASE WHEN x.uses <> '{}' THEN (
                   SELECT n.name FROM unnest(x.uses) AS n(name)
                   WHERE NOT coalesce((SELECT k.open FROM key_room k
                                       WHERE k.name = n.name AND k.scope IN ('', x.tenant_id)
                                       ORDER BY k.scope DESC LIMIT 1), false)
                   LIMIT 1) END AS blocked
        FROM (SELECT h.id, h.next_run_at, h.ctid, h.tenant_id, h.priority, h.uses,
                     h.late_after_s FROM heads h
              UNION SELECT * FROM past UNION SELECT * FROM deeper UNION SELECT * FROM fair
              UNION SELECT * FROM urgent)
             AS x
    ) AS y
    WINDOW w AS (PARTITION BY y.tenant_id
                 ORDER BY y.blocked IS NOT NULL, y.rank DESC, y.next_run_at, y.id)
),
places AS MATERIALIZED (
    SELECT r.tenant_id, r.next_run_at,
           row_number() OVER (PARTITION BY r.tenant_id ORDER BY r.next_run_at, r.id) AS n
    FROM ranked r WHERE r.top > 0 AND r.blocked IS NULL
),
-- The claim takes places oldest first; fair: by turn (each tenant's first place, then each
-- one's second, ...), then oldest first, so a priority never moves a tenant ahead of
-- another. Beyond its read turns a tenant is served from the oldest (heads). A tenant's
-- turns beyond its free places (migration 014) are `held`, and come last; so is a blocked
-- job. Places of one time go by turn (a tenant's own in its order), then by lot (a
-- fan-out's jobs share their due time), so a claim smaller than the tenants due does not
-- favour the same tenant every time.
candidates AS (
    SELECT v.id, v.next_run_at, v.ctid, v.held OR v.blocked IS NOT NULL AS held, v.blocked
    FROM (
        SELECT u.*, u.turn > r.room IS TRUE AS held,
               CASE WHEN u.top > 0 AND u.blocked IS NULL
                    THEN (SELECT p.next_run_at FROM places p
                          WHERE p.tenant_id = u.tenant_id AND p.n = u.turn)
                    ELSE u.next_run_at END AS place
        FROM ranked u LEFT JOIN tenant_room r ON r.tenant_id = u.tenant_id
    ) AS v
    ORDER BY held, CASE WHEN %(fair)s THEN v.turn END, v.place, v.turn, random()
    LIMIT %(limit)s
),
-- A slot passed over for a named limit is recorded waiting (limit_waits), once; the take
-- that lets it run ends the wait.
waited AS (
    INSERT INTO limit_waits (job_id, slot, key_name, since)
    SELECT j.id, j.slot_at, c.blocked, (SELECT t FROM clock)
    FROM candidates c JOIN jobs j ON j.ctid = c.ctid
    WHERE c.blocked IS NOT NULL
    ON CONFLICT DO NOTHING
),
-- Locked and updated by ctid. A row changed since this statement's snapshot is locked in
-- a version the update cannot see: it is left for the next claim, never claimed twice.
locked AS (
    SELECT j.ctid FROM jobs j JOIN candidates c ON j.ctid = c.ctid
    WHERE NOT c.held AND j.status = 'idle' AND j.next_run_at <= (SELECT due FROM clock)
      -- A regular slot of a job that is not `allow` waits while a flight of it runs (a
      -- backfill, a rerun, a trigger with a payload: migrations 011, 026): one probe of
      -- flights_pkey per candidate, none found as a rule.
      AND (j.overlap = 'allow' OR NOT EXISTS (
          SELECT 1 FROM flights f WHERE f.job_id = j.id AND f.status = 'running'))
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
        run_revision = j.revision,
        updated_at = k.t
    FROM locked l, clock k
    WHERE j.ctid = l.ctid
    -- In the order of cluster.store.lock.records.ClaimedJob's fields: built by position. An empty
    -- payload comes back as NULL: no JSON to parse for most jobs.
    RETURNING j.id, j.tenant_id, j.name, nullif(j.payload, '{}'::jsonb) AS payload, j.shard_id,
              j.slot_at, j.attempt, j.lease_token, j.next_run_at, {fields:claimed:j.@},
              j.cancel_by, false AS flight, j.calendar_rule, j.gated,
              j.prev_slot AS previous_slot, j.last_success_at AS last_success, j.state,
              j.slot_origin AS origin,
              -- Its key let in a slot that waited for it: a primary-key probe of
              -- limit_waits for a row that took a key, none for others.
              j.holds IS NOT NULL AND EXISTS (
                  SELECT 1 FROM limit_waits w WHERE w.job_id = j.id AND w.slot = j.slot_at)
                  AS waited,
              j.timing_from
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
-- held: a due job was passed over (a tenant's limit, a row locked by another claim, a place
-- refused by tenant_take or a key by limit_take), for the claim loop's next claim to go fair
-- at once. Not a job whose named limit had no room: claiming again changes nothing for it;
-- the run that gives a place back wakes the claim loops (limit_free), and next_due says when
-- a rate key that passed one over reopens (time alone gives its token back).
SELECT k.t AS db_now,
       least((SELECT t FROM next_due),
             CASE WHEN EXISTS (SELECT 1 FROM candidates WHERE blocked IS NOT NULL) THEN (
                 SELECT min(r.reopens) FROM key_room r
                 WHERE r.name IN (SELECT blocked FROM candidates)) END) AS next_due,
       (SELECT count(*) FROM candidates WHERE blocked IS NULL)
           > (SELECT count(*) FROM claimed) AS held, c.*
FROM clock k LEFT JOIN claimed c ON true
ORDER BY c.slot_at;

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
-- Hands running jobs back for another attempt of the same slot, due at once or at its
-- time if it was claimed ahead of it (a node shutting down), recording the attempt as lost; fenced and read by id like `complete`
-- (test_history.py, test_lease_plans.py).
WITH clock AS (
    SELECT coalesce(%(now)s::timestamptz, now()) AS t
),
freed AS (
    UPDATE jobs j SET
        status = CASE WHEN j.paused THEN 'paused' ELSE 'idle' END,
        next_run_at = CASE WHEN j.paused THEN '9999-01-01Z'::timestamptz
                           ELSE greatest(k.t, j.next_run_at) END,
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
                         %(reason)s, NULL, o.slot_origin, o.run_revision)
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
WHERE f.status = 'running' AND f.locked_by = %(node_id)s
UNION ALL
-- Its each-node runs (migration `0.3.0_pre_zones_each_node`), released as flights are.
SELECT n.job_id, n.slot, n.lease_token FROM node_runs n
WHERE n.status = 'running' AND n.member = %(node_id)s;

-- name: recover
-- Takes back the slots of runs whose owner is dead (neither live nor connected) or whose
-- lease expired; with %(own)s, those this node id left running before a restart. Each is
-- due again at once as its next attempt, or at its time if its node took it ahead of it
-- and died before it came (never early: test_recovery.py); the lost one is recorded (test_session.py) and
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
                           WHEN j.paused THEN '9999-01-01Z'::timestamptz
                           ELSE greatest(k.t, j.next_run_at) END,
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
    -- As `claim` returns a job (ClaimedJob), then whether it is poison, why it was taken
    -- back and from whom.
    RETURNING j.id, j.tenant_id, j.name, nullif(j.payload, '{}'::jsonb) AS payload, j.shard_id,
              j.slot_at, j.attempt, j.lease_token, j.next_run_at, {fields:claimed:j.@},
              j.cancel_by, false AS flight, j.calendar_rule, false AS gated,
              NULL::timestamptz AS previous_slot, NULL::timestamptz AS last_success,
              NULL::jsonb AS state, j.slot_origin AS origin, false AS waited, j.timing_from,
              d.poison, d.reason, d.locked_by,
              record_run(j.id, j.tenant_id, j.name, j.slot_at, d.attempt, d.locked_by,
                         d.locked_zone, 'lost', d.lease_token, d.locked_at, k.t, NULL,
                         d.reason || ' (node ' || coalesce(d.locked_by, '?') || ')', NULL,
                         j.slot_origin, j.run_revision),
              raise_alert('lost', j.id, j.tenant_id, j.name, j.slot_at, d.attempt, d.locked_by,
                          d.locked_zone, NULL,
                          d.reason || ' (node ' || coalesce(d.locked_by, '?') || ')')
)
SELECT * FROM reset r;

-- name: fair_tenants
-- The fair claim's tenant list (cluster/store/lock/tenantlist.py, docs/design/fairness.md):
-- the tenants with jobs in each held shard, each with its oldest next_run_at there, one
-- probe of jobs_tenant_due each (a loose index scan, migration 013: the first entry past
-- the last tenant is the next tenant's oldest job); those due within the horizon, by when
-- the list is walked again. Walked at most once a second while claims go fair.
WITH RECURSIVE present AS (
    SELECT s.shard, f.tenant, f.oldest
    FROM unnest(%(shards)s::int[]) AS s(shard)
    CROSS JOIN LATERAL (
        SELECT j.tenant_id AS tenant, j.next_run_at AS oldest FROM jobs j
        WHERE j.shard_id = s.shard
        ORDER BY j.tenant_id, j.next_run_at
        LIMIT 1
    ) AS f
    UNION ALL
    SELECT p.shard, f.tenant, f.oldest
    FROM present p
    CROSS JOIN LATERAL (
        SELECT j.tenant_id AS tenant, j.next_run_at AS oldest FROM jobs j
        WHERE j.shard_id = p.shard AND j.tenant_id > p.tenant
        ORDER BY j.tenant_id, j.next_run_at
        LIMIT 1
    ) AS f
)
-- As three array literals, which the claims pass back as they are: the node never parses
-- or formats the pairs (a list of 300 pairs formatted at every claim cost more node CPU
-- than the walk saved).
SELECT coalesce(array_agg(p.shard)::text, '{}') AS shards,
       coalesce(array_agg(p.tenant)::text, '{}') AS tenants,
       coalesce(array_agg(p.oldest)::text, '{}') AS oldest
FROM present p
WHERE p.oldest <= coalesce(%(now)s::timestamptz, now()) + %(horizon_s)s * interval '1s';
