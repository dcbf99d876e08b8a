-- Read-only statements behind `pulse status` (cluster/store/observe/snapshot.py).

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
-- the oldest of them is. Not watch jobs: no node runs them, their slots await pings.
WITH clock AS (
    SELECT coalesce(%(now)s::timestamptz, now()) AS t
)
SELECT k.t AS db_now, count(j.id)::int AS due,
       extract(epoch FROM k.t - min(j.next_run_at))::float8 AS oldest_s
FROM clock k LEFT JOIN jobs j ON j.status = 'idle' AND j.next_run_at <= k.t AND NOT j.watch
GROUP BY k.t;

-- name: status_paused
-- Paused jobs with the note that says why (at most `limit`, the most recently paused first).
SELECT tenant_id, name, pause_note, count(*) OVER ()::int AS total
FROM jobs WHERE paused
ORDER BY updated_at DESC, tenant_id, name
LIMIT %(limit)s;

-- name: status_held
-- Slots held by their upstreams (docs/design/gates.md): how many, the oldest slot, and how
-- many are still held a minute past their bound, which a node should have taken by then to
-- record skipped. One probe of jobs_gate_wait.
SELECT count(*)::int AS held, min(j.slot_at) AS oldest,
       (count(*) FILTER (WHERE j.next_run_at
                               < coalesce(%(now)s::timestamptz, now()) - interval '1 minute'))::int
           AS overdue
FROM jobs j WHERE j.gate_wait;

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
      -- A slot a calendar or a blackout window moved started late (or early) on purpose.
      AND r.origin IS DISTINCT FROM 'calendar' AND r.origin IS DISTINCT FROM 'window'
    UNION ALL
    SELECT j.locked_at, j.slot_at
    FROM jobs j CROSS JOIN clock k
    WHERE j.status = 'running' AND j.attempt = 1
      AND j.slot_at > k.t - make_interval(secs => %(horizon_s)s)
      AND j.locked_at > k.t - make_interval(secs => %(window_s)s)
      AND j.slot_origin IS DISTINCT FROM 'calendar' AND j.slot_origin IS DISTINCT FROM 'window'
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

-- name: status_pinned
-- Jobs pinned to zones and the children of each-zone jobs, for `pulse status` (unplaced
-- ones make the cluster unhealthy); each-zone parents never run themselves.
SELECT tenant_id, name, zones, paused FROM jobs WHERE zones IS NOT NULL AND NOT each_zone
ORDER BY tenant_id, name;
