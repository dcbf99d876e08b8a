-- Flights: the slots of overlap `allow` jobs, each under a lease of its own (migration 009,
-- cluster/store/lock/flights.py, docs/design/overlap.md, tests/integration/test_flights.py).

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
-- A claimed slot of an each-node job is fanned out instead (migration
-- `0.3.0_pre_zones_each_node`, docs/design/each-node.md): its roll-up, and a row per member
-- of %(members)s in its zones, the caller's running at once (`room`) unless an earlier
-- slot's run of its is not over (one at a time per member), the others' queued and woken
-- by NOTIFY; no member there: the slot is recorded skipped.
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
    SELECT (e->>0)::uuid AS job_id, (e->>1)::timestamptz AS slot, e->>2 AS reason,
           (e->>3)::timestamptz AS skipped_from
    FROM json_array_elements(%(skips)s::json) AS e
),
-- Each-node: the live members as the caller sees them, [[member, zone], ...].
member_in AS MATERIALIZED (
    SELECT e->>0 AS member, e->>1 AS zone FROM json_array_elements(%(members)s::json) AS e
),
claimed AS MATERIALIZED (
    SELECT j.id, j.tenant_id, j.name, j.shard_id, j.attempt, j.locked_at, i.token, i.slot,
           i.next_run_at, i.next_slot, j.slot_origin, j.run_revision, j.each_node, j.zones,
           -- Backfill and rerun flights (migrations 011, 026) never take a regular slot's place.
           (SELECT count(*) FROM flights f WHERE f.job_id = j.id
                AND coalesce(f.origin, '') NOT IN ('backfill', 'rerun')) < j.max_concurrent
               AS room
    FROM jobs j JOIN input i ON i.id = j.id
    WHERE j.id = ANY(ARRAY(SELECT x.id FROM input x))
      AND j.lease_token = i.token AND j.status = 'running'
    FOR UPDATE OF j
),
flown AS (
    INSERT INTO flights (job_id, slot, shard_id, status, attempt, due_at, lease_token,
                         locked_by, locked_zone, locked_at, lease_expires_at, origin,
                         revision)
    SELECT c.id, c.slot, c.shard_id, 'running', c.attempt, c.slot, c.token, %(node_id)s,
           %(zone)s, c.locked_at, k.t + make_interval(secs => %(lease_s)s), c.slot_origin,
           c.run_revision
    FROM claimed c CROSS JOIN clock k
    WHERE c.room AND NOT c.each_node
    ON CONFLICT (job_id, slot) DO NOTHING
),
-- Each-node: the members of each fanned-out slot (of its zones, when pinned).
targets AS (
    SELECT c.id, c.slot, c.shard_id, c.token, c.locked_at, m.member, m.zone
    FROM claimed c JOIN member_in m ON c.each_node AND (c.zones IS NULL OR m.zone = ANY(c.zones))
),
fanned AS (
    INSERT INTO node_slots (job_id, slot, members, pending, opened_at, origin, revision)
    SELECT c.id, c.slot, ARRAY(SELECT t.member FROM targets t WHERE t.id = c.id ORDER BY 1),
           (SELECT count(*) FROM targets t WHERE t.id = c.id), k.t, c.slot_origin,
           c.run_revision
    FROM claimed c CROSS JOIN clock k
    WHERE c.each_node AND EXISTS (SELECT 1 FROM targets t WHERE t.id = c.id)
    ON CONFLICT (job_id, slot) DO NOTHING
    RETURNING job_id, slot
),
fanned_out AS (
    INSERT INTO node_runs (job_id, slot, member, zone, shard_id, status, due_at, lease_token,
                           locked_at, lease_expires_at)
    SELECT t.id, t.slot, t.member, t.zone, t.shard_id,
           CASE WHEN t.here THEN 'running' ELSE 'queued' END, t.slot, t.token,
           CASE WHEN t.here THEN t.locked_at END,
           CASE WHEN t.here THEN k.t + make_interval(secs => %(lease_s)s) END
    FROM (SELECT t.*, t.member = %(node_id)s AND NOT EXISTS (
              SELECT 1 FROM node_runs r WHERE r.job_id = t.id AND r.member = t.member) AS here
          FROM targets t) AS t
    JOIN fanned f ON f.job_id = t.id AND f.slot = t.slot CROSS JOIN clock k
    RETURNING job_id, member, status
),
-- Wakes the other members at commit (node.pipeline.listener); referenced below so it runs.
woken AS (
    SELECT pg_notify(current_schema() || '_wake', 'members') AS sent
    FROM (SELECT 1 FROM fanned_out WHERE status = 'queued' LIMIT 1) AS x
),
nobody AS (
    INSERT INTO runs (job_id, tenant_id, job_name, scheduled_for, attempt, node_id, zone,
                      status, finished_at, last_error, origin, revision)
    SELECT c.id, c.tenant_id, c.name, c.slot, 1, %(node_id)s, %(zone)s, 'skipped', k.t,
           'no live node' || coalesce(' in zones ' || array_to_string(c.zones, ','), ''),
           c.slot_origin, c.run_revision
    FROM claimed c CROSS JOIN clock k
    WHERE c.each_node AND NOT EXISTS (SELECT 1 FROM targets t WHERE t.id = c.id)
    ON CONFLICT (job_id, scheduled_for) DO NOTHING
),
skipped AS (
    INSERT INTO runs (job_id, tenant_id, job_name, scheduled_for, attempt, node_id, zone,
                      status, finished_at, last_error, skipped_from)
    SELECT c.id, c.tenant_id, c.name, s.slot, 1, %(node_id)s, %(zone)s, 'skipped', k.t,
           s.reason, s.skipped_from
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
    RETURNING j.id, CASE WHEN c.each_node THEN EXISTS (
                      SELECT 1 FROM fanned_out o WHERE o.job_id = c.id AND o.status = 'running')
                    ELSE c.room END AS room
),
again AS (
    SELECT i.id, true AS room FROM input i
    JOIN flights f ON f.job_id = i.id AND f.slot = i.slot AND f.lease_token = i.token
    WHERE f.status = 'running' AND f.locked_by = %(node_id)s
      AND i.id NOT IN (SELECT c.id FROM claimed c)
    UNION ALL
    SELECT i.id, true AS room FROM input i
    JOIN node_runs n ON n.job_id = i.id AND n.slot = i.slot AND n.member = %(node_id)s
                    AND n.lease_token = i.token
    WHERE n.status = 'running' AND i.id NOT IN (SELECT c.id FROM claimed c)
)
SELECT id, room FROM moved WHERE (SELECT count(*) FROM woken) >= 0
UNION ALL
SELECT id, room FROM again;

-- name: claim_flights
-- Queued flights of the held shards that are due (a retry's backoff is over, or the flight
-- was taken back from a dead node), oldest first, at most %(limit)s: running under the
-- caller and a new token. Rows as `claim` returns them (cluster.store.lock.records.ClaimedJob).
-- Then, in the same statement, the caller's own queued each-node runs, whatever their shard
-- (migration `0.3.0_pre_zones_each_node`), within what is left of %(limit)s, those due
-- within %(ahead_s)s too: a NOTIFY wakes the members as the slot is claimed, a moment ahead
-- of it, and the executor starts each run at its due time.
WITH clock AS (
    SELECT coalesce(%(now)s::timestamptz, now()) AS t
),
-- A due flight passed over for a named limit with no room is recorded waiting, once (as
-- `claim` records a job's slot); read only when the cluster has a key.
waited AS (
    INSERT INTO limit_waits (job_id, slot, key_name, since)
    SELECT f.job_id, f.slot, b.name, (SELECT t FROM clock)
    FROM unnest(%(shards)s::int[]) AS s(shard)
    JOIN flights f ON f.shard_id = s.shard AND f.status = 'queued'
                  AND f.due_at <= (SELECT t FROM clock)
    CROSS JOIN LATERAL (SELECT limit_ids_blocked(f.uses_keys, (SELECT t FROM clock)) AS name) AS b
    WHERE EXISTS (SELECT 1 FROM limit_keys) AND f.uses_keys IS NOT NULL AND b.name IS NOT NULL
    ON CONFLICT DO NOTHING
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
          -- Likewise a flight whose named limits have no room (0.3.0_pre_uses_named_limits).
          AND (f.uses_keys IS NULL
               OR limit_ids_blocked(f.uses_keys, (SELECT t FROM clock)) IS NULL)
          -- A flight of a job that is not `allow` (a backfill, a rerun, a trigger with a
          -- payload) waits while its regular slot runs; a schedule's flight has no origin.
          AND (f.origin IS NULL OR NOT EXISTS (
              SELECT 1 FROM jobs x
              WHERE x.id = f.job_id AND x.status = 'running' AND x.overlap <> 'allow'))
          -- A backfill or rerun slot of a job with upstreams waits for theirs (migration 021),
          -- at most its after-timeout, a day without one (migration `0.2.0_pre_gates_bounded_waits`). Claimed, its gate
          -- is asked again, and a slot it does not run is recorded skipped (claimer.py).
          AND (coalesce(f.origin, '') NOT IN ('backfill', 'rerun') OR NOT EXISTS (
              SELECT 1 FROM jobs x
              WHERE x.id = f.job_id AND x.gated
                AND f.due_at + make_interval(secs => coalesce(x.after_timeout_s, 86400))
                    > (SELECT t FROM clock)
                AND starts_with(gate_verdict(x.id, f.slot), 'wait: ')))
        ORDER BY f.due_at
        LIMIT %(limit)s
        FOR UPDATE OF f SKIP LOCKED
    ) AS p
    LIMIT %(limit)s
),
flown AS (
    UPDATE flights f SET
        status = 'running',
        locked_by = %(node_id)s,
        locked_zone = %(zone)s,
        locked_at = k.t,
        lease_expires_at = k.t + make_interval(secs => %(lease_s)s),
        lease_token = f.lease_token + 1
    FROM picked p, clock k, jobs j
    WHERE f.ctid = p.ctid AND j.id = f.job_id
    RETURNING j.id, j.tenant_id, j.name, CASE WHEN f.payload IS NULL
                                             THEN nullif(j.payload, '{}'::jsonb)
                                             ELSE f.payload END AS payload,
              j.shard_id, f.slot, f.attempt, f.lease_token, f.due_at, {fields:claimed:j.@},
              f.cancel_by, true AS flight, j.calendar_rule,
              j.gated AND coalesce(f.origin, '') IN ('backfill', 'rerun') AS gated,
              NULL::timestamptz AS previous_slot, NULL::timestamptz AS last_success,
              NULL::jsonb AS state, f.origin, false AS waited,
              NULL::timestamptz AS timing_from
),
-- Each-node: one run of a job at a time on a member, its oldest slot first.
member_picked AS (
    SELECT n.ctid FROM node_runs n
    WHERE n.member = %(node_id)s AND n.status = 'queued'
      AND n.due_at <= (SELECT t FROM clock) + make_interval(secs => %(ahead_s)s)
      AND NOT EXISTS (SELECT 1 FROM node_runs r WHERE r.job_id = n.job_id
                          AND r.member = n.member AND (r.status = 'running' OR r.slot < n.slot))
    ORDER BY n.due_at
    LIMIT greatest(0, %(limit)s - (SELECT count(*) FROM flown))
    FOR UPDATE OF n SKIP LOCKED
),
member_claimed AS (
    UPDATE node_runs n SET
        status = 'running',
        locked_at = k.t,
        lease_expires_at = k.t + make_interval(secs => %(lease_s)s),
        lease_token = n.lease_token + 1
    FROM member_picked p, clock k, jobs j
    WHERE n.ctid = p.ctid AND j.id = n.job_id
    RETURNING j.id, j.tenant_id, j.name, nullif(j.payload, '{}'::jsonb) AS payload,
              j.shard_id, n.slot, n.attempt, n.lease_token, n.due_at, {fields:claimed:j.@},
              n.cancel_by, true AS flight, j.calendar_rule, false AS gated,
              NULL::timestamptz AS previous_slot, NULL::timestamptz AS last_success,
              NULL::jsonb AS state, NULL::text AS origin, false AS waited,
              NULL::timestamptz AS timing_from
)
SELECT * FROM flown
UNION ALL
SELECT * FROM member_claimed;

-- name: complete_flights
-- Fenced completion of flights, one per ended attempt: the last attempt of a slot deletes
-- its flight, a failed one with retries left queues it again for its backoff. Each
-- attempt's run row is written as by `complete`, and a slot that failed for good raises
-- `failed`, one that ended too soon `too_fast`, one whose metrics failed the job's
-- --assert `assertion_failed`, and those two (or a clean success of a job with
-- expectations) set the job's health. Returns the (job id, slot) pairs applied; the rest
-- were fenced. The clock is the statement's start, as `complete`'s: a flight's run may be
-- completed in its handler's transaction.
WITH clock AS (
    SELECT coalesce(%(now)s::timestamptz, statement_timestamp()) AS t
),
-- Per attempt: [job id, slot, token, outcome, error, duration_us, retry_at or null,
-- output as JSON text or null, assertion or null] (cluster.store.lock.records.flight_params).
input AS MATERIALIZED (
    SELECT (e->>0)::uuid AS id, (e->>1)::timestamptz AS slot, (e->>2)::bigint AS token,
           e->>3 AS outcome, e->>4 AS error, (e->>5)::bigint / 1e6::float8 AS duration_s,
           (e->>6)::timestamptz AS retry_at, (e->>7)::jsonb AS output, e->>8 AS assertion
    FROM json_array_elements(%(done)s::json) AS e
),
ended AS (
    DELETE FROM flights f USING input i, jobs j, clock k
    WHERE f.job_id = i.id AND f.slot = i.slot AND f.lease_token = i.token
      AND f.status = 'running' AND i.retry_at IS NULL AND j.id = f.job_id
    RETURNING f.job_id, f.slot,
              f.origin = 'trigger' AND i.outcome <> 'skipped' AS counted,
              record_run(j.id, j.tenant_id, j.name, f.slot, f.attempt, %(node_id)s, %(zone)s,
                         i.outcome, i.token, f.locked_at, k.t, i.duration_s, i.error,
                         i.output, f.origin, f.revision),
              -- After record_run: a triggered, rerun or backfilled success of a job that
              -- feeds chained ones makes their slot, once (migrations 023 and `0.2.0_pre_gates_bounded_waits`).
              CASE WHEN j.feeds AND i.outcome = 'succeeded' THEN chain_release(j.id, f.slot, k.t)
              END,
              CASE WHEN i.outcome IN ('failed', 'timed_out') THEN raise_alert('failed', j.id,
                  j.tenant_id, j.name, f.slot, f.attempt, %(node_id)s, %(zone)s, i.error,
                  NULL) END,
              CASE WHEN i.outcome = 'succeeded' AND j.expect_min_s > i.duration_s THEN
                  raise_alert('too_fast', j.id, j.tenant_id, j.name, f.slot, f.attempt,
                  %(node_id)s, %(zone)s, NULL, 'ended after '
                  || round(i.duration_s::numeric, 3)::float8 || 's (expected at least '
                  || j.expect_min_s || 's)') END,
              CASE WHEN i.assertion IS NOT NULL THEN raise_alert('assertion_failed', j.id,
                  j.tenant_id, j.name, f.slot, f.attempt, %(node_id)s, %(zone)s, NULL,
                  'assertion failed: ' || i.assertion) END,
              CASE WHEN i.outcome = 'succeeded' AND j.expect_min_s > i.duration_s
                       THEN 'too_fast'
                   WHEN i.assertion IS NOT NULL THEN 'assertion_failed'
                   WHEN i.outcome = 'succeeded' AND f.expect_marks IS NULL
                        AND num_nonnulls(j.expect_max_s, j.expect_min_s, j.deadline,
                                         j.expect_baseline, j.asserts) > 0 THEN 'ok'
              END AS expect_now
),
-- The job row, of the jobs whose flights change it only: the health of a job with
-- expectations (expect_now is NULL for the rest), and the runs of a trigger. A trigger's
-- run (with a payload, or of a done job) is a run of the job, counted in runs_done as
-- `complete` counts its own slot's (docs/jobs.md, max_runs). Once they reach max_runs the
-- job is done: at once when paused, or idle with its own slot still to come; a slot of its
-- own that is due or running runs, and its end makes the job done (`complete`), so no slot
-- it owed is left without a record. Judged on the row the update locks, not on this
-- statement's snapshot: a claim of the job's slot may commit meanwhile.
touched AS (
    SELECT job_id, count(*) FILTER (WHERE counted)::int AS counted,
           (array_agg(expect_now ORDER BY slot DESC)
                FILTER (WHERE expect_now IS NOT NULL))[1] AS expect_now
    FROM ended
    GROUP BY job_id
    HAVING bool_or(counted) OR bool_or(expect_now IS NOT NULL)
),
job_after AS (
    UPDATE jobs j SET
        expect_state = coalesce(e.expect_now, j.expect_state),
        expect_state_at = CASE WHEN e.expect_now IS NULL
                                    OR e.expect_now = 'ok' AND j.expect_state = 'ok'
                               THEN j.expect_state_at ELSE k.t END,
        runs_done = j.runs_done + e.counted,
        status = CASE WHEN e.counted > 0 AND j.runs_done + e.counted >= j.max_runs
                           AND (j.status = 'paused' OR j.status = 'idle' AND j.slot_at > k.t)
                      THEN 'done' ELSE j.status END,
        next_run_at = CASE WHEN e.counted > 0 AND j.runs_done + e.counted >= j.max_runs
                                AND (j.status = 'paused'
                                     OR j.status = 'idle' AND j.slot_at > k.t)
                           THEN '9999-01-01Z'::timestamptz ELSE j.next_run_at END
    FROM touched e, clock k
    WHERE j.id = e.job_id
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
                         i.output, o.origin, o.revision)
),
-- Each-node (migration `0.3.0_pre_zones_each_node`): the caller's run of a slot ends its
-- row and takes its place in the slot's roll-up; a failed attempt with retries left is
-- queued again for the same member.
member_ended AS (
    DELETE FROM node_runs n USING input i, clock k
    WHERE n.job_id = i.id AND n.slot = i.slot AND n.member = %(node_id)s
      AND n.lease_token = i.token AND n.status = 'running' AND i.retry_at IS NULL
    RETURNING n.job_id, n.slot,
              node_run_ended(n.job_id, n.slot, n.member, i.outcome, i.error, %(node_id)s,
                             %(zone)s, k.t)
),
member_retried AS (
    UPDATE node_runs n SET
        status = 'queued',
        attempt = n.attempt + 1,
        due_at = i.retry_at,
        locked_at = NULL,
        lease_expires_at = NULL
    FROM input i
    WHERE n.job_id = i.id AND n.slot = i.slot AND n.member = %(node_id)s
      AND n.lease_token = i.token AND n.status = 'running' AND i.retry_at IS NOT NULL
    RETURNING n.job_id, n.slot
)
SELECT job_id, slot FROM ended
UNION ALL
SELECT job_id, slot FROM retried
UNION ALL
SELECT job_id, slot FROM member_ended
UNION ALL
SELECT job_id, slot FROM member_retried;

-- name: renew_flights
-- Extends the leases of the caller's running flights, and of its each-node runs (migration
-- `0.3.0_pre_zones_each_node`); returns those still held, each with who asked to cancel it, if
-- anyone did.
WITH clock AS (
    SELECT coalesce(%(now)s::timestamptz, now()) AS t
),
input AS MATERIALIZED (
    SELECT * FROM unnest(%(ids)s::uuid[], %(slots)s::timestamptz[], %(tokens)s::bigint[])
        AS i(id, slot, token)
),
flown AS (
    UPDATE flights f SET lease_expires_at = k.t + make_interval(secs => %(lease_s)s)
    FROM input i, clock k
    WHERE f.job_id = i.id AND f.slot = i.slot AND f.lease_token = i.token
      AND f.status = 'running'
    RETURNING f.job_id, f.slot, f.cancel_by
),
members AS (
    UPDATE node_runs n SET lease_expires_at = k.t + make_interval(secs => %(lease_s)s)
    FROM input i, clock k
    WHERE n.job_id = i.id AND n.slot = i.slot AND n.member = %(node_id)s
      AND n.lease_token = i.token AND n.status = 'running'
    RETURNING n.job_id, n.slot, n.cancel_by
)
SELECT * FROM flown
UNION ALL
SELECT * FROM members;

-- name: release_flights
-- Hands running flights back for another attempt, due at once (a node shutting down),
-- recording the attempt as lost; fenced like `complete_flights`. The caller's each-node
-- runs go back to the queue of the same member, due at once (migration
-- `0.3.0_pre_zones_each_node`): a claim whose answer was lost is run after all; at a
-- shutdown, the drain that follows records them missed.
WITH clock AS (
    SELECT coalesce(%(now)s::timestamptz, now()) AS t
),
input AS MATERIALIZED (
    SELECT * FROM unnest(%(ids)s::uuid[], %(slots)s::timestamptz[], %(tokens)s::bigint[])
        AS i(id, slot, token)
),
flown AS (
    UPDATE flights f SET
        status = 'queued',
        attempt = f.attempt + 1,
        due_at = k.t,
        locked_by = NULL,
        locked_zone = NULL,
        locked_at = NULL,
        lease_expires_at = NULL,
        lease_token = f.lease_token + 1
    FROM input i
         JOIN flights o ON o.job_id = i.id AND o.slot = i.slot,
         jobs j, clock k
    WHERE f.job_id = i.id AND f.slot = i.slot AND f.lease_token = i.token
      AND f.status = 'running' AND j.id = f.job_id
    RETURNING f.job_id, f.slot,
              record_run(j.id, j.tenant_id, j.name, f.slot, o.attempt, o.locked_by,
                         o.locked_zone, 'lost', i.token, o.locked_at, k.t, NULL, %(reason)s,
                         NULL, o.origin, o.revision)
),
members AS (
    UPDATE node_runs n SET
        status = 'queued',
        due_at = k.t,
        locked_at = NULL,
        lease_expires_at = NULL,
        lease_token = n.lease_token + 1
    FROM input i, clock k
    WHERE n.job_id = i.id AND n.slot = i.slot AND n.member = %(node_id)s
      AND n.lease_token = i.token AND n.status = 'running'
    RETURNING n.job_id, n.slot
)
SELECT job_id, slot FROM flown
UNION ALL
SELECT job_id, slot FROM members;

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
),
-- Each-node runs of the held shards (migration `0.3.0_pre_zones_each_node`) whose member is gone
-- (no heartbeat, no session), whose lease expired, or that their member left queued a
-- lease past their due time: recorded missed, never run elsewhere. With %(own)s, those
-- this node id left before a restart.
members_missed AS (
    DELETE FROM node_runs n USING clock k
    WHERE CASE WHEN %(own)s THEN n.member = %(node_id)s
               ELSE n.shard_id = ANY(%(shards)s::int[])
                    AND ((NOT (n.member = ANY(%(live)s::text[]))
                          AND n.member NOT IN (SELECT node_id FROM sessions))
                         OR (n.status = 'running' AND n.lease_expires_at < k.t)
                         OR (n.status = 'queued'
                             AND n.due_at + make_interval(secs => %(lease_s)s) < k.t)) END
    -- One asked to cancel (cancel_node_runs) is recorded cancelled, as a lost ordinary
    -- run asked to cancel is.
    RETURNING node_run_ended(
        n.job_id, n.slot, n.member,
        CASE WHEN n.cancel_by IS NULL THEN 'missed' ELSE 'cancelled' END,
        CASE WHEN n.cancel_by IS NOT NULL THEN 'cancelled by ' || n.cancel_by
             WHEN %(own)s THEN 'restarted'
             WHEN NOT (n.member = ANY(%(live)s::text[])) THEN 'died'
             WHEN n.status = 'running' THEN 'lease expired'
             ELSE 'not started' END,
        %(node_id)s, %(zone)s, k.t)
)
UPDATE flights f SET
    status = CASE WHEN d.poison THEN 'running' ELSE 'queued' END,
    attempt = f.attempt + (NOT d.poison)::int,
    due_at = CASE WHEN d.poison THEN f.due_at ELSE greatest(k.t, f.due_at) END,
    locked_by = CASE WHEN d.poison THEN %(node_id)s END,
    locked_zone = CASE WHEN d.poison THEN %(zone)s END,
    locked_at = CASE WHEN d.poison THEN d.locked_at END,
    lease_expires_at = CASE WHEN d.poison THEN k.t + make_interval(secs => %(lease_s)s) END,
    lease_token = f.lease_token + 1
FROM dead d, clock k, jobs j
WHERE f.ctid = d.ctid AND f.lease_token = d.lease_token AND j.id = f.job_id
RETURNING j.id, j.tenant_id, j.name, CASE WHEN f.payload IS NULL
                                         THEN nullif(j.payload, '{}'::jsonb)
                                         ELSE f.payload END AS payload,
          j.shard_id, f.slot, f.attempt, f.lease_token, f.due_at, {fields:claimed:j.@},
          f.cancel_by, true AS flight, j.calendar_rule,
          j.gated AND coalesce(f.origin, '') IN ('backfill', 'rerun') AS gated,
          NULL::timestamptz AS previous_slot, NULL::timestamptz AS last_success,
          NULL::jsonb AS state, f.origin, false AS waited, NULL::timestamptz AS timing_from,
          d.poison, d.reason,
          d.locked_by,
          record_run(j.id, j.tenant_id, j.name, f.slot, d.attempt, d.locked_by,
                     d.locked_zone, 'lost', d.lease_token, d.locked_at, k.t, NULL,
                     d.reason || ' (node ' || coalesce(d.locked_by, '?') || ')', NULL,
                     f.origin, f.revision),
          raise_alert('lost', j.id, j.tenant_id, j.name, f.slot, d.attempt, d.locked_by,
                      d.locked_zone, NULL,
                      d.reason || ' (node ' || coalesce(d.locked_by, '?') || ')');

-- name: cancel_flights
-- Asks whoever runs the job's flights to cancel them: the given slot, or every one running;
-- an each-zone job's, its children's (cancel_job).
UPDATE flights f SET cancel_by = %(by)s
FROM jobs j
WHERE j.id IN (SELECT x.id FROM jobs x WHERE x.tenant_id = %(tenant_id)s AND x.name = %(name)s
               UNION ALL
               SELECT c.id FROM jobs p JOIN jobs c ON c.parent_id = p.id
               WHERE p.tenant_id = %(tenant_id)s AND p.name = %(name)s AND p.each_zone)
  AND f.job_id = j.id
  AND (%(scope)s::text IS NULL OR j.tenant_id = %(scope)s)
  AND f.status = 'running' AND (%(slot)s::timestamptz IS NULL OR f.slot = %(slot)s)
RETURNING j.id, j.name, j.shard_id, f.slot AS slot_at, f.attempt, f.lease_token, f.locked_by,
          j.overlap;

-- name: trigger_flight
-- A slot stamped with the current time, queued as a flight due now with the given payload
-- (`pulse jobs trigger --payload`; cluster/store/jobstore/inputs.py). No row: one is there already at
-- that instant, or the job has %(most)s such flights waiting (the caller tells which).
-- Through the function trigger_flight, as the owner: the web's role may not insert flights
-- (migration `0.3.0_pre_web_skips_and_triggers`, docs/design/roles.md).
SELECT flight_slot AS slot
FROM trigger_flight(%(job_id)s, %(scope)s, %(payload)s::jsonb, %(now)s::timestamptz,
                    %(most)s::int);


-- name: drain_node_runs
-- A node leaving (docs/design/each-node.md): its each-node runs that have not ended, queued
-- or still running at the drain's end, recorded missed, 'drained', never run elsewhere.
DELETE FROM node_runs n USING (SELECT coalesce(%(now)s::timestamptz, now()) AS t) AS k
WHERE n.member = %(node_id)s
RETURNING n.job_id, n.slot,
          node_run_ended(n.job_id, n.slot, n.member, 'missed', 'drained', %(node_id)s,
                         %(zone)s, k.t);

-- name: cancel_node_runs
-- `pulse runs cancel` of an every-node slot (docs/design/each-node.md): each member's run
-- of the open slot marked cancelled by %(by)s, through the function cancel_node_runs (as
-- the owner; migration `0.3.0_pre_zones_each_node_compose`). Running ones come back
-- (`started`) for the caller to wake their member; queued ones ended, never started.
SELECT c_job AS job_id, c_slot AS slot, c_member AS member, c_attempt AS attempt,
       c_token AS lease_token, c_started AS started
FROM cancel_node_runs(%(tenant_id)s, %(name)s, %(scope)s, %(slot)s::timestamptz, %(by)s,
                      %(now)s::timestamptz);
