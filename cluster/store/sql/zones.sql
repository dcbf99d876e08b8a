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
-- no node locks, never due. Nothing if it already is. A running one ends with its run:
-- its completion goes to no slot (timing_slot, from the apply's clock %(now)s), and it
-- stays idle (`complete`).
UPDATE jobs SET each_zone = true, zones = %(zones)s::text[], shard_id = %(shard_id)s,
    next_run_at = '9999-01-01Z', updated_at = now(),
    timing_slot = CASE WHEN status = 'running' THEN '9999-01-01Z' ELSE timing_slot END,
    timing_start = CASE WHEN status = 'running' THEN '9999-01-01Z' ELSE timing_start END,
    timing_from = CASE WHEN status = 'running' THEN %(now)s ELSE timing_from END
WHERE tenant_id = %(tenant_id)s AND name = %(name)s
  AND (each_zone, zones, shard_id, next_run_at)
      IS DISTINCT FROM (true, %(zones)s::text[], %(shard_id)s, '9999-01-01Z'::timestamptz)
RETURNING id, shard_id;

-- name: unpark_each_zone
-- An each-zone parent made an ordinary job again: due at its next slot %(slot_at)s,
-- starting at %(next_run_at)s (its children go in the same transaction: release_children).
-- One made each-zone while it ran and made ordinary again before its run ended keeps its
-- slot, and its completion goes on there (timing_slot).
UPDATE jobs SET each_zone = false,
    next_run_at = CASE WHEN paused OR status = 'running' THEN next_run_at
                       ELSE %(next_run_at)s END,
    slot_at = CASE WHEN status = 'running' THEN slot_at ELSE %(slot_at)s END,
    attempt = CASE WHEN status = 'running' THEN attempt ELSE 1 END,
    timing_slot = %(slot_at)s, timing_start = %(next_run_at)s,
    timing_from = CASE WHEN status = 'running' THEN %(now)s ELSE timing_from END
WHERE tenant_id = %(tenant_id)s AND name = %(name)s AND each_zone
RETURNING id;

-- name: release_children
-- The children of %(ids)s (each-zone jobs an operator just changed or removed) that their
-- parent no longer wants: it is an ordinary job now, it left their zone out, or it is gone.
-- Removed with their history in the operator's transaction, as `pulse jobs remove` removes
-- a job (a run in progress is not stopped; its record goes with its job), so that no child
-- runs a slot its parent, an ordinary job again, runs too.
DELETE FROM jobs c
WHERE c.parent_id = ANY(%(ids)s::uuid[])
  AND (%(scope)s::text IS NULL OR c.tenant_id = %(scope)s)
  AND NOT coalesce((SELECT p.each_zone AND (p.zones IS NULL OR c.zones[1] = ANY(p.zones))
                    FROM jobs p WHERE p.id = c.parent_id), false)
RETURNING c.name;

-- name: each_zone_parents
-- Each-zone jobs that cover the zone (all zones when not restricted).
-- `fresh`: its child there is at least as new as it (nothing to write).
SELECT p.id, p.tenant_id, p.name, p.schedule, p.tz, p.dst_repeated, p.dst_skipped,
       p.jitter_s, p.paused_until,
       EXISTS (SELECT 1 FROM jobs c
               WHERE c.parent_id = p.id AND c.zones = ARRAY[%(zone)s::text]
                 AND c.updated_at >= p.updated_at) AS fresh
FROM jobs p
WHERE p.each_zone AND (p.zones IS NULL OR %(zone)s = ANY(p.zones));

-- name: parent_of
-- The each-zone job whose child %(id)s is, if it is one.
SELECT p.name FROM jobs c JOIN jobs p ON p.id = c.parent_id
WHERE c.id = %(id)s AND (%(scope)s::text IS NULL OR p.tenant_id = %(scope)s);

-- name: lock_children
-- The children of the each-zone jobs %(ids)s, locked until the transaction ends: those an
-- operator's action on their parent acts on too (cluster/store/jobstore/children.py).
SELECT c.* FROM jobs c
WHERE c.parent_id = ANY(%(ids)s::uuid[])
  AND (%(scope)s::text IS NULL OR c.tenant_id = %(scope)s)
ORDER BY c.name
FOR UPDATE;

-- name: upsert_zone_child
-- The parent's child for one zone: created, or its definition brought in line with the
-- parent's. Its id, shard and run history stay; a timing change moves an idle child to
-- the new next slot %(slot_at)s, starting at %(next_run_at)s (its jitter: the child's name
-- keys it), as `upsert_jobs` does (a slot kept, its retry waiting, keeps its attempt);
-- a running child's completion goes on there
-- (timing_slot). What a child copies is declared with the job's options (`child`):
-- cluster/jobs/spec.py. Its timing holds from when the parent's was written
-- (timing_from), and a `pause --until` of its parent holds it too (paused_until).
-- The parent's row is locked FOR SHARE: an apply making it an ordinary job, not yet
-- committed, is waited for, and then no child is made (release_children took the others).
-- Returns the child as it is now.
INSERT INTO jobs AS j (
    id, tenant_id, name, status, shard_id, next_run_at, slot_at, zones, parent_id,
    timing_from, paused_until, {fields:child:@})
SELECT %(id)s, p.tenant_id, p.name || '@' || %(zone)s,
    CASE WHEN p.paused THEN 'paused' ELSE 'idle' END, %(shard_id)s,
    CASE WHEN p.paused THEN '9999-01-01Z'::timestamptz ELSE %(next_run_at)s END,
    %(slot_at)s, ARRAY[%(zone)s::text], p.id, p.timing_from, p.paused_until,
    {fields:child:p.@}
FROM jobs p WHERE p.id = %(parent_id)s AND p.each_zone
FOR SHARE
ON CONFLICT (tenant_id, name) DO UPDATE SET
    {fields:child:@ = excluded.@},
    status = CASE WHEN j.status = 'running' THEN 'running'
                  WHEN excluded.paused THEN 'paused' ELSE 'idle' END,
    (next_run_at, slot_at, attempt) = (
        SELECT CASE WHEN m.moves OR (j.status <> 'running' AND excluded.paused)
                    THEN excluded.next_run_at ELSE j.next_run_at END,
               CASE WHEN m.moves THEN excluded.slot_at ELSE j.slot_at END,
               CASE WHEN m.moves AND excluded.slot_at <> j.slot_at THEN 1 ELSE j.attempt END
        FROM (SELECT j.status <> 'running' AND (
                  ({fields:child_timing:j.@}) IS DISTINCT FROM ({fields:child_timing:excluded.@})
                  OR (j.paused AND NOT excluded.paused)) AS moves) m),
    (timing_slot, timing_start) = (
        SELECT CASE WHEN m.moves THEN excluded.slot_at ELSE j.timing_slot END,
               CASE WHEN m.moves THEN excluded.next_run_at ELSE j.timing_start END
        FROM (SELECT j.status = 'running' AND excluded.slot_at < '9998-01-01Z'::timestamptz
                     AND ({fields:child_timing:j.@})
                     IS DISTINCT FROM ({fields:child_timing:excluded.@}) AS moves) m),
    timing_from = excluded.timing_from,
    updated_at = now()
WHERE j.parent_id = excluded.parent_id
  AND ({fields:child:j.@}) IS DISTINCT FROM ({fields:child:excluded.@})
RETURNING j.*;

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
