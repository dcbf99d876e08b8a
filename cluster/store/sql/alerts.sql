-- Alerts: rules, the outbox's deliveries and the late pass (cluster/store/housekeeping/alerts.py,
-- docs/design/alerts.md).

-- name: alert_rule_insert
INSERT INTO alert_rules (name, url, events, format, secret_env, tenant_id, job_name,
                         legacy_signature)
VALUES (%(name)s, %(url)s, %(events)s, %(format)s, %(secret_env)s, %(tenant_id)s,
        %(job_name)s, %(legacy_signature)s)
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
       r.legacy_signature, (SELECT t FROM clock) AS db_now, e.*
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

-- name: expect_runs
-- The runs going on now of jobs that expect them to end within a time (expect_max_s,
-- deadline, expect_baseline): the job's claim or its running flights, with the events
-- already raised for each and, for a baseline, the p95 of the newest kept successful runs.
-- A probe of jobs_expecting: jobs without such expectations are never read.
WITH clock AS (
    SELECT coalesce(%(now)s::timestamptz, now()) AS t
)
SELECT j.id, j.tenant_id, j.name, j.tz, j.deadline, j.expect_max_s, j.expect_baseline,
       r.slot, r.lease_token, r.flight, r.marks, k.t AS db_now,
       extract(epoch FROM k.t - greatest(r.locked_at, r.due))::float8 AS running_s,
       b.p95_s, coalesce(b.runs, 0) AS baseline_runs
FROM jobs j
CROSS JOIN clock k
CROSS JOIN LATERAL (
    SELECT j.slot_at AS slot, j.lease_token, j.locked_at, j.next_run_at AS due,
           false AS flight,
           CASE WHEN j.expect_slot = j.slot_at THEN j.expect_marks END AS marks
    -- An `allow` job's row runs only until its claim is handed to a flight: the flight's.
    WHERE j.status = 'running' AND j.locked_at IS NOT NULL AND j.overlap <> 'allow'
    UNION ALL
    SELECT f.slot, f.lease_token, f.locked_at, f.due_at, true, f.expect_marks
    FROM flights f WHERE f.job_id = j.id AND f.status = 'running'
) AS r
LEFT JOIN LATERAL (
    SELECT percentile_cont(0.95) WITHIN GROUP (ORDER BY x.duration_s) AS p95_s,
           count(*) AS runs
    FROM (SELECT u.duration_s FROM runs u
          WHERE u.job_id = j.id AND u.status = 'succeeded' AND u.duration_s IS NOT NULL
          ORDER BY u.scheduled_for DESC LIMIT %(baseline_runs)s) AS x
) AS b ON j.expect_baseline IS NOT NULL
WHERE (j.expect_max_s IS NOT NULL OR j.deadline IS NOT NULL OR j.expect_baseline IS NOT NULL)
ORDER BY j.id, r.slot;

-- name: expect_mark
-- Raises each given event (`slow`, `overdue`) for the run of its slot, once: the marks on
-- the job row (for the slot in expect_slot) or on the flight are re-checked on the locked
-- row, so a pass of another node that marked it meanwhile, or a run that ended, changes
-- nothing (tests/integration/test_expectations.py). At most one event per run per call.
-- Per event: [job id, slot, lease token, event, detail, flight].
WITH clock AS (
    SELECT coalesce(%(now)s::timestamptz, now()) AS t
),
input AS MATERIALIZED (
    SELECT (e->>0)::uuid AS id, (e->>1)::timestamptz AS slot, (e->>2)::bigint AS token,
           e->>3 AS event, e->>4 AS detail, (e->>5)::boolean AS flight
    FROM json_array_elements(%(marks)s::json) AS e
),
claims AS (
    UPDATE jobs j SET
        expect_marks = CASE WHEN j.expect_slot = i.slot
                            THEN array_append(j.expect_marks, i.event)
                            ELSE ARRAY[i.event] END,
        expect_slot = i.slot,
        expect_state = i.event,
        expect_state_at = k.t
    FROM input i, clock k
    WHERE NOT i.flight AND j.id = i.id AND j.status = 'running' AND j.slot_at = i.slot
      AND j.lease_token = i.token
      AND NOT coalesce(j.expect_slot = i.slot AND i.event = ANY(j.expect_marks), false)
    RETURNING j.id, i.slot, i.event,
              raise_alert(i.event, j.id, j.tenant_id, j.name, i.slot, j.attempt, j.locked_by,
                          j.locked_zone, NULL, i.detail)
),
flown AS (
    UPDATE flights f SET expect_marks = array_append(f.expect_marks, i.event)
    FROM input i, jobs j
    WHERE i.flight AND f.job_id = i.id AND f.slot = i.slot AND f.status = 'running'
      AND f.lease_token = i.token AND j.id = f.job_id
      AND NOT coalesce(i.event = ANY(f.expect_marks), false)
    RETURNING f.job_id AS id, f.slot, i.event,
              raise_alert(i.event, j.id, j.tenant_id, j.name, f.slot, f.attempt, f.locked_by,
                          f.locked_zone, NULL, i.detail)
),
flown_health AS (
    UPDATE jobs j SET expect_state = m.event, expect_state_at = k.t
    FROM (SELECT DISTINCT ON (id) id, event FROM flown ORDER BY id, slot DESC) AS m, clock k
    WHERE j.id = m.id
)
SELECT id, slot, event FROM claims
UNION ALL
SELECT id, slot, event FROM flown;
