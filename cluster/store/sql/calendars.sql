-- Business calendars, blackout windows and the jobs that plan with them (cluster/store/jobstore/calendars.py,
-- docs/design/calendars.md).

-- name: upsert_calendar
-- Create or replace a calendar; `version` counts its changes. Returns the row and whether
-- it is new.
INSERT INTO calendars AS c (name, weekdays, excluded, source)
VALUES (%(name)s, %(weekdays)s, %(excluded)s, %(source)s)
ON CONFLICT (name) DO UPDATE SET
    weekdays = excluded.weekdays,
    excluded = excluded.excluded,
    source = excluded.source,
    version = c.version + 1,
    updated_at = now()
RETURNING c.*, (xmax = 0) AS inserted;

-- name: list_calendars
-- Every calendar with how many jobs use it (the exclusions counted, not listed).
SELECT c.name, c.weekdays, cardinality(c.excluded) AS excluded_count, c.source, c.version,
       c.created_at, c.updated_at,
       (SELECT count(*) FROM jobs j WHERE j.calendar = c.name) AS jobs
FROM calendars c
ORDER BY c.name;

-- name: get_calendar
SELECT c.*, (SELECT count(*) FROM jobs j WHERE j.calendar = c.name) AS jobs
FROM calendars c WHERE c.name = %(name)s;

-- name: lock_calendar
-- A job written with calendar %(name)s holds this until its transaction ends, and a change
-- of that calendar waits for it (change_calendar), so the change re-plans the job. An
-- advisory lock, not FOR SHARE: that would need UPDATE on calendars, which neither the
-- node's nor the web's role has (cluster/store/schema/roles.py).
SELECT count(*) FROM pg_advisory_xact_lock_shared(
    hashtextextended(current_schema() || ':calendar:' || %(name)s, 0));

-- name: change_calendar
-- Taken by a change or removal of calendar %(name)s before it writes: it waits for the
-- jobs being written with the calendar, and they wait for it.
SELECT count(*) FROM pg_advisory_xact_lock(
    hashtextextended(current_schema() || ':calendar:' || %(name)s, 0));

-- name: read_calendar
-- Read after lock_calendar, in a statement of its own, so it sees a change that committed
-- while the lock waited.
SELECT * FROM calendars WHERE name = %(name)s;

-- name: remove_calendar
-- Refused (no row) while a job uses the calendar: the foreign key would fail anyway.
DELETE FROM calendars c
WHERE c.name = %(name)s AND NOT EXISTS (SELECT 1 FROM jobs j WHERE j.calendar = c.name)
RETURNING c.name;

-- name: calendar_jobs
-- The jobs that use the calendar, locked: their next slot is planned again.
SELECT j.id, j.tenant_id, j.name, j.schedule, j.tz, j.dst_repeated, j.dst_skipped,
       j.status, j.shard_id, j.jitter_s, j.calendar, j.on_excluded, j.business_day, j.labels,
       j.slot_at, j.next_run_at, j.gate_wait, j.paused_until, j.timing_from
FROM jobs j WHERE j.calendar = %(name)s
ORDER BY j.id
FOR UPDATE;

-- name: window_jobs
-- The jobs a blackout window of %(window_scope)s covers, locked, as calendar_jobs.
SELECT j.id, j.tenant_id, j.name, j.schedule, j.tz, j.dst_repeated, j.dst_skipped,
       j.status, j.shard_id, j.jitter_s, j.calendar, j.on_excluded, j.business_day, j.labels,
       j.slot_at, j.next_run_at, j.gate_wait, j.paused_until, j.timing_from
FROM jobs j
WHERE j.parent_id IS NULL AND NOT j.each_zone AND NOT starts_with(j.schedule, '@after:')
  AND (%(window_scope)s = 'cluster'
       OR (%(window_scope)s = 'label' AND j.labels ->> %(label_key)s::text = %(label_value)s
           AND (%(tenant_id)s::text IS NULL OR j.tenant_id = %(tenant_id)s))
       OR (j.tenant_id = %(tenant_id)s AND (%(window_scope)s = 'tenant' OR j.name = %(job_name)s)))
ORDER BY j.id
FOR UPDATE;

-- name: active_windows
-- The blackout windows that have not ended by %(now)s, each job's filtered by the caller.
SELECT id, starts_at, ends_at, window_scope, tenant_id, job_name, defer, note, created_at,
       label_key, label_value
FROM windows WHERE ends_at > %(now)s
ORDER BY starts_at, id;

-- name: list_windows
SELECT id, starts_at, ends_at, window_scope, tenant_id, job_name, defer, note, created_at,
       label_key, label_value
FROM windows ORDER BY starts_at, id;

-- name: add_window
INSERT INTO windows (starts_at, ends_at, window_scope, tenant_id, job_name, defer, note,
                     label_key, label_value)
VALUES (%(starts_at)s, %(ends_at)s, %(window_scope)s, %(tenant_id)s, %(job_name)s,
        %(defer)s, %(note)s, %(label_key)s, %(label_value)s)
RETURNING id, starts_at, ends_at, window_scope, tenant_id, job_name, defer, note, created_at,
          label_key, label_value;

-- name: remove_window
DELETE FROM windows WHERE id = %(id)s
RETURNING id, starts_at, ends_at, window_scope, tenant_id, job_name, defer, note, created_at,
          label_key, label_value;

-- name: withdraw_rule_skips
-- The skipped records a job's calendar or windows wrote ahead of their slot (a completion
-- records those it plans past, a weekend's on Friday), taken back before a calendar or
-- window change, or an apply of a new timing, plans the job again: they said what the old
-- rule would do, and the new one decides those slots (records them again, or runs them).
-- Only for a job the change moves (replan_calendar_job's condition) or a paused one (its
-- resume plans it afresh); a slot whose time has come keeps its record, as does every other
-- skip ahead (skip-next's: the operator's).
-- Through withdraw_rule_skips, as the owner: a job applied over the API does it too.
-- %(ids)s: the jobs, in one statement (an apply's batch).
SELECT k.id AS job_id, w.withdrawn_slot AS scheduled_for
FROM unnest(%(ids)s::uuid[]) AS k(id)
CROSS JOIN LATERAL withdraw_rule_skips(k.id, %(scope)s, %(now)s::timestamptz) AS w;

-- name: replan_calendar_job
-- The job's copy of its calendar and windows, and for an idle job on its first attempt its
-- next slot (a running slot, or one retrying, keeps its slot: its completion plans the
-- next; a triggered slot stays as it is). A job paused until a time is planned from that
-- time by the caller (holds.planned_from). rule_changed_at: a running slot's completion
-- leaves the skips its old rule would record after now to the new one (complete).
UPDATE jobs SET
    calendar_rule = %(calendar_rule)s,
    rule_changed_at = CASE WHEN calendar_rule IS DISTINCT FROM %(calendar_rule)s
                           THEN %(now)s::timestamptz ELSE rule_changed_at END,
    (next_run_at, slot_at, slot_origin) = (
        SELECT CASE WHEN m.moves THEN %(next_run_at)s ELSE next_run_at END,
               CASE WHEN m.moves THEN %(slot_at)s ELSE slot_at END,
               CASE WHEN m.moves THEN %(slot_origin)s ELSE slot_origin END
        FROM (SELECT status = 'idle' AND attempt = 1
                     AND slot_origin IS DISTINCT FROM 'trigger' AS moves) m),
    updated_at = now()
WHERE id = %(id)s
RETURNING id, shard_id, status;

-- name: record_planned_skips
-- The slots a job's calendar or windows skip on the way to the slot it was just planned at
-- (created, or re-planned by a calendar or window change), a JSON list of [slot, reason]:
-- recorded skipped as a completion records those it passes. Only slots before the job's
-- slot: a job that kept its slot (running, retrying) records nothing here. Through
-- record_skipped, as the owner: a job created over the API writes them too (migration
-- `0.3.0_pre_web_skips_and_triggers`, docs/design/roles.md).
SELECT r.skipped_slot AS scheduled_for
FROM jobs j
CROSS JOIN LATERAL (
    SELECT coalesce(json_agg(e), '[]'::json) AS skips
    FROM json_array_elements(%(skips)s::json) AS e
    WHERE (e->>0)::timestamptz < j.slot_at
) AS s
CROSS JOIN LATERAL record_skipped(j.id, %(scope)s, s.skips, %(now)s::timestamptz) AS r
WHERE j.id = %(id)s;
