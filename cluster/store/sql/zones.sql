-- Zone placement: zone spaces, pinned jobs and the children of each-zone jobs
-- (cluster/store/jobstore/definitions.py, session.py, docs/design/zones.md).

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
    zones, parent_id, expect_max_s, expect_min_s, deadline, expect_baseline, asserts,
    assert_fails)
SELECT %(id)s, p.tenant_id, p.name || '@' || %(zone)s, p.schedule, p.tz, p.dst_repeated,
    p.dst_skipped, p.handler, p.payload, CASE WHEN p.paused THEN 'paused' ELSE 'idle' END,
    p.paused, %(shard_id)s,
    CASE WHEN p.paused THEN '9999-01-01Z'::timestamptz ELSE %(next_run_at)s END,
    %(next_run_at)s, p.catch_up, p.grace_s, p.max_backfill, p.timeout_s, p.max_retries,
    p.retry_backoff_s, p.keep_for_s, p.keep_runs, p.output_limit, p.late_after_s,
    p.pause_after_failures, p.overlap, p.max_concurrent, p.cancel_grace_s,
    ARRAY[%(zone)s::text], p.id, p.expect_max_s, p.expect_min_s, p.deadline,
    p.expect_baseline, p.asserts, p.assert_fails
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
    expect_max_s = excluded.expect_max_s, expect_min_s = excluded.expect_min_s,
    deadline = excluded.deadline, expect_baseline = excluded.expect_baseline,
    asserts = excluded.asserts, assert_fails = excluded.assert_fails,
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
       j.overlap, j.max_concurrent, j.cancel_grace_s, j.expect_max_s, j.expect_min_s,
       j.deadline, j.expect_baseline, j.asserts, j.assert_fails)
    IS DISTINCT FROM
      (excluded.schedule, excluded.tz, excluded.dst_repeated, excluded.dst_skipped,
       excluded.handler, excluded.payload, excluded.paused, excluded.catch_up,
       excluded.grace_s, excluded.max_backfill, excluded.timeout_s, excluded.max_retries,
       excluded.retry_backoff_s, excluded.keep_for_s, excluded.keep_runs,
       excluded.output_limit, excluded.late_after_s, excluded.pause_after_failures,
       excluded.overlap, excluded.max_concurrent, excluded.cancel_grace_s,
       excluded.expect_max_s, excluded.expect_min_s, excluded.deadline,
       excluded.expect_baseline, excluded.asserts, excluded.assert_fails)
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
