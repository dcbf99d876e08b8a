-- pulse audit: the jobs of a scope, their definitions over time and their records, read in
-- one snapshot and streamed in slot order (cluster/store/observe/audit.py,
-- docs/design/audit.md). Every statement filters by the caller's tenant scope.

-- name: audit_jobs
-- The next page of the jobs audited, in (tenant, name) order after the last one of the
-- page before (none: the first page; the jobs UNIQUE (tenant_id, name) index), with where
-- each stands now: its current slot, whether that slot is held (a gate's wait, a retry's
-- backoff, a named limit's: limit_waits, its tenant's limit), its slots in flight; and its
-- retention, with the slot of its keep_runs-th newest run if that lies in or after the
-- range (older ones are pruned by count: one probe of runs (job_id, scheduled_for) from
-- its newest, stopping at the range's start; none when the job has fewer runs since).
SELECT j.id, j.tenant_id, j.name, j.status, j.slot_at, j.next_run_at, j.gate_wait,
       j.last_run_at, j.created_at, j.schedule, j.tz, j.dst_repeated, j.dst_skipped,
       j.each_zone, j.paused, j.keep_for_s, j.keep_runs, j.parent_id,
       (SELECT x.scheduled_for FROM runs x
        WHERE x.job_id = j.id AND x.scheduled_for >= %(start)s::timestamptz
          AND (%(scope)s::text IS NULL OR x.tenant_id = %(scope)s)
        ORDER BY x.scheduled_for DESC
        OFFSET coalesce(j.keep_runs, %(keep_runs)s::integer) - 1 LIMIT 1) AS kept_runs_from,
       j.uses <> '{}' AND EXISTS (SELECT 1 FROM limit_waits w
                                  WHERE w.job_id = j.id AND w.slot = j.slot_at
                                    AND w.ended IS NULL) AS key_wait,
       -- Its tenant's runs at once fill its limit (migration 014): a due slot waits.
       j.limited AND EXISTS (SELECT 1 FROM tenant_room r
                             WHERE r.tenant_id = j.tenant_id AND r.room <= 0) AS tenant_full,
       -- An each-node slot is in flight while a member's run of it has not ended
       -- (node_slots: open until the last one ends).
       coalesce((SELECT array_agg(x.slot ORDER BY x.slot)
                 FROM (SELECT f.slot FROM flights f WHERE f.job_id = j.id
                       UNION SELECT s.slot FROM node_slots s WHERE s.job_id = j.id) AS x),
                '{}') AS flights
FROM jobs j
WHERE (%(scope)s::text IS NULL OR j.tenant_id = %(scope)s)
  AND (%(tenant)s::text IS NULL OR j.tenant_id = %(tenant)s)
  AND (%(job)s::text IS NULL OR j.name = %(job)s)
  AND (%(after_tenant)s::text IS NULL
       OR (j.tenant_id, j.name) > (%(after_tenant)s::text, %(after_name)s::text))
ORDER BY j.tenant_id, j.name
LIMIT %(limit)s;

-- name: audit_revisions
-- The revisions of the audited jobs (the incarnation that exists: its job id), and of the
-- each-zone parents of the audited children, oldest first, with the fields that say when
-- its slots fall (and max_runs: when it is done).
SELECT r.job_id, r.at, r.change,
       jsonb_build_object('schedule', r.definition -> 'schedule', 'tz', r.definition -> 'tz',
                          'dst_repeated', r.definition -> 'dst_repeated',
                          'dst_skipped', r.definition -> 'dst_skipped',
                          'paused', r.definition -> 'paused',
                          'paused_until', r.definition -> 'paused_until',
                          'each_zone', r.definition -> 'each_zone',
                          'max_runs', r.definition -> 'max_runs') AS definition
FROM job_revisions r
WHERE r.job_id = ANY(%(ids)s::uuid[])
  AND (%(scope)s::text IS NULL OR r.tenant_id = %(scope)s)
ORDER BY r.job_id, r.revision;

-- name: audit_ran_before
-- Of the audited jobs that have had a max_runs, the records before the range that count
-- toward it (they ran: not skipped or running, nor an operator's re-run or backfill), and
-- the slot of the newest: an audit from the middle of a job's history reads when it was
-- done as one from its start does. One probe of runs (job_id, scheduled_for) per job.
SELECT x.job_id, count(*)::int AS ran, max(x.scheduled_for) AS last
FROM runs x
WHERE x.job_id = ANY(%(ids)s::uuid[]) AND x.scheduled_for < %(start)s::timestamptz
  AND x.status NOT IN ('skipped', 'running')
  AND coalesce(x.origin, '') NOT IN ('rerun', 'backfill')
  AND (%(scope)s::text IS NULL OR x.tenant_id = %(scope)s)
GROUP BY x.job_id;

-- name: audit_chained
-- The slots released to the audited chained jobs (chain_slots) in the range.
SELECT c.job_id, c.slot FROM chain_slots c
WHERE c.job_id = ANY(%(ids)s::uuid[])
  AND c.slot >= %(start)s::timestamptz AND c.slot < %(end)s::timestamptz
ORDER BY c.job_id, c.slot;

-- name: audit_skipped_from
-- The skipped records of the audited jobs that also stand for the slots before them without
-- a row of their own, from runs.skipped_from (migration 0.3.0_pre_zzzz_skipped_from), those
-- reaching into the range, wherever the record itself is: the runs_skipped_from index,
-- which holds them alone.
SELECT r.job_id, r.skipped_from, r.scheduled_for, r.last_error
FROM runs r
WHERE r.job_id = ANY(%(ids)s::uuid[]) AND r.skipped_from IS NOT NULL
  AND r.scheduled_for > %(start)s::timestamptz AND r.skipped_from < %(end)s::timestamptz
  AND (%(scope)s::text IS NULL OR r.tenant_id = %(scope)s)
ORDER BY r.job_id, r.scheduled_for;

-- name: audit_runs
-- The run rows of the audited jobs in the range, job by job in the order given, each job's
-- in slot order: one probe of runs (job_id, scheduled_for) per job, sorted per job only.
-- A slot that waited for a named limit says which and how long, each of its waits in the
-- order they began (limit_waits, one probe of its primary key per row: an empty table's as
-- a rule).
SELECT i.n, r.scheduled_for, r.status, r.attempt, r.node_id, r.lease_token, r.origin,
       r.last_error, r.history, r.started_at,
       (SELECT array_agg(w.key_name || ' ' || extract(epoch FROM w.ended - w.since)::numeric(12, 3)
                         ORDER BY w.since)
        FROM limit_waits w
        WHERE w.job_id = i.id AND w.slot = r.scheduled_for AND w.ended IS NOT NULL) AS waited
FROM unnest(%(ids)s::uuid[]) WITH ORDINALITY AS i(id, n)
CROSS JOIN LATERAL (
    SELECT x.scheduled_for, x.status, x.attempt, x.node_id, x.lease_token, x.origin,
           x.last_error, x.history, x.started_at
    FROM runs x
    WHERE x.job_id = i.id
      AND x.scheduled_for >= %(start)s::timestamptz AND x.scheduled_for < %(end)s::timestamptz
      AND (%(scope)s::text IS NULL OR x.tenant_id = %(scope)s)
) AS r
ORDER BY i.n, r.scheduled_for;
