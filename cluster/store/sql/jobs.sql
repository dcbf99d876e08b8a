-- Jobs: their definitions and the operator's actions on one job (cluster/store/jobstore/store.py,
-- definitions.py, runcontrol.py), the wake-up NOTIFY and the console's jobs page.

-- name: db_now
SELECT coalesce(%(now)s::timestamptz, now()) AS now;

-- name: act_as
-- Who changes jobs on this connection and how (cli, file, module, sync, api), for the
-- job_revisions rows the triggers on jobs write (migration 029); '' unsets them.
SELECT set_config('pulse.who', %(who)s, false), set_config('pulse.how', %(how)s, false);

-- name: upsert_jobs
-- Create, or update the definition of, each job of %(jobs)s, a JSON list of rows by column
-- name (one statement a batch: cluster/store/jobstore/bulk.py), by (tenant_id, name). An
-- unchanged definition, or an existing one when `replace` is false (`jobs add`), touches
-- nothing (no row returned). A running job keeps its slot; an idle one whose timing
-- changed moves to the new schedule's next slot. calendar_rule (the calendar and windows
-- as they stand) is not part of the definition: `pulse calendars` and `pulse windows`
-- re-plan on their changes. The job's options are the columns its declaration says
-- upsert_jobs writes (`written`), and those whose change moves it (`timing`):
-- cluster/jobs/spec.py. Returns each row written as it is now, and whether it is new.
-- timing_from is the time of the write (the apply's clock): kept while the timing is.
INSERT INTO jobs AS j (
    id, tenant_id, name, status, shard_id, next_run_at, slot_at, calendar_rule, slot_origin,
    timing_from, {fields:written:@})
SELECT
    x.id, x.tenant_id, x.name, CASE WHEN x.paused THEN 'paused' ELSE 'idle' END,
    x.shard_id,
    CASE WHEN x.paused THEN '9999-01-01Z'::timestamptz ELSE x.next_run_at END,
    x.slot_at, x.calendar_rule, x.slot_origin, x.timing_from,
    {fields:written:x.@}
FROM jsonb_populate_recordset(NULL::jobs, %(jobs)s::jsonb) AS x
ON CONFLICT (tenant_id, name) DO UPDATE SET
    {fields:written:@ = excluded.@},
    calendar_rule = excluded.calendar_rule,
    -- A job whose expectations are all removed has no health to show any more.
    expect_state = CASE WHEN num_nonnulls(excluded.expect_max_s, excluded.expect_min_s,
                                          excluded.deadline, excluded.expect_baseline,
                                          excluded.asserts) > 0 THEN j.expect_state END,
    -- A done job (a one-off, or one past its max_runs) stays done unless it is given
    -- another time, paused or not, as `pulse jobs pause` leaves it, or more runs than it
    -- ran (max_runs raised above runs_done, or unset): then it moves to its next slot
    -- from now, as a resumed job does (the slots while it was done are not owed). An idle
    -- or paused job whose max_runs is lowered to the runs it ran is done now, not after
    -- one more run: dropped.py records the slots it owed. One whose slot waits for a retry
    -- is in that slot, as a running one is: its last attempt's end makes it done. An idle job moves to the new
    -- next slot when its timing changed or it is resumed; excluded.next_run_at is that
    -- slot's jittered start, excluded.slot_at the slot. A failed slot waiting for its
    -- retry that the new timing keeps (the writer plans it again at its own slot) keeps
    -- its attempt and its retry's time.
    (status, next_run_at, slot_at, attempt, slot_origin) = (
        SELECT CASE WHEN j.status = 'running' THEN 'running'
                    WHEN m.stays OR m.ends THEN 'done'
                    WHEN excluded.paused THEN 'paused' ELSE 'idle' END,
               CASE WHEN m.ends THEN '9999-01-01Z'::timestamptz
                    WHEN m.retry OR m.stays THEN j.next_run_at
                    WHEN m.moves OR (j.status <> 'running' AND excluded.paused)
                    THEN excluded.next_run_at ELSE j.next_run_at END,
               CASE WHEN m.moves THEN excluded.slot_at ELSE j.slot_at END,
               CASE WHEN m.moves AND NOT m.retry THEN 1 ELSE j.attempt END,
               CASE WHEN m.moves THEN excluded.slot_origin ELSE j.slot_origin END
        FROM (SELECT j.status <> 'running' AND NOT d.stays AND NOT d.ends AND (
                  ({fields:timing:j.@}) IS DISTINCT FROM ({fields:timing:excluded.@})
                  OR (j.paused AND NOT excluded.paused) OR j.status = 'done') AS moves,
                j.status = 'idle' AND j.attempt > 1 AND NOT excluded.paused
                  AND excluded.slot_at = j.slot_at AS retry,
                d.stays, d.ends
              FROM (SELECT t.same AND j.status = 'done' AND NOT (
                               j.max_runs IS NOT NULL
                               AND coalesce(excluded.max_runs > j.runs_done, true)
                               AND excluded.slot_at < '9999-01-01Z'::timestamptz) AS stays,
                           t.same AND j.status IN ('idle', 'paused') AND j.attempt = 1
                               AND coalesce(excluded.max_runs <= j.runs_done, false) AS ends
                    FROM (SELECT (j.schedule, j.tz) = (excluded.schedule, excluded.tz)
                                 AS same) t) d) m),
    -- A slot kept under a new timing (held, deferred, retried, running) walks on from here
    -- to the new timing's slots after now, not to those before (Schedule.starting).
    timing_from = CASE WHEN ({fields:timing:j.@}) IS DISTINCT FROM ({fields:timing:excluded.@})
                       THEN excluded.timing_from ELSE j.timing_from END,
    -- A running slot's completion goes on to the slot the new timing planned: its node
    -- walks with the timing it claimed (complete). Not a chained job's (its next slot is
    -- the next one released) nor one whose new timing has no slot.
    (timing_slot, timing_start) = (
        SELECT CASE WHEN m.moves THEN excluded.slot_at ELSE j.timing_slot END,
               CASE WHEN m.moves THEN excluded.next_run_at ELSE j.timing_start END
        FROM (SELECT j.status = 'running' AND excluded.slot_at < '9998-01-01Z'::timestamptz
                     AND ({fields:timing:j.@})
                     IS DISTINCT FROM ({fields:timing:excluded.@}) AS moves) m),
    updated_at = now()
WHERE %(replace)s
  AND ({fields:written:j.@}) IS DISTINCT FROM ({fields:written:excluded.@})
RETURNING j.*, (xmax = 0) AS inserted;

-- name: jobs_named
-- The jobs of (%(tenant_ids)s[i], %(names)s[i]) that exist: what an apply reads once for
-- all of its jobs (cluster/store/jobstore/bulk.py).
SELECT j.* FROM jobs j
WHERE (j.tenant_id, j.name) IN (SELECT * FROM unnest(%(tenant_ids)s::text[], %(names)s::text[]))
  AND (%(scope)s::text IS NULL OR j.tenant_id = %(scope)s);

-- name: jobs_edged
-- Of the jobs of (%(tenant_ids)s[i], %(names)s[i]) that exist, those gated now or named in
-- (%(after_tenant_ids)s[i], %(after_names)s[i]) (their spec waits for upstreams): the jobs
-- an apply writes edges for (cluster/store/jobstore/gates.py), without reading the rest.
SELECT j.* FROM jobs j
WHERE (j.tenant_id, j.name) IN (SELECT * FROM unnest(%(tenant_ids)s::text[], %(names)s::text[]))
  AND (j.gated OR (j.tenant_id, j.name) IN (
      SELECT * FROM unnest(%(after_tenant_ids)s::text[], %(after_names)s::text[])))
  AND (%(scope)s::text IS NULL OR j.tenant_id = %(scope)s);

-- name: list_jobs
-- %(labels)s: a JSON object of labels every job listed has, or NULL.
SELECT * FROM jobs
WHERE (%(tenant_id)s::text IS NULL OR tenant_id = %(tenant_id)s)
  AND (%(labels)s::jsonb IS NULL OR labels @> %(labels)s::jsonb)
ORDER BY tenant_id, name;

-- name: get_job
-- %(scope)s: the tenant an API token is scoped to, else NULL (here and below).
SELECT * FROM jobs WHERE tenant_id = %(tenant_id)s AND name = %(name)s
    AND (%(scope)s::text IS NULL OR tenant_id = %(scope)s);

-- name: lock_job
SELECT * FROM jobs WHERE tenant_id = %(tenant_id)s AND name = %(name)s
    AND (%(scope)s::text IS NULL OR tenant_id = %(scope)s)
FOR UPDATE;

-- name: lock_jobs
-- The revisions of the jobs of (%(tenant_ids)s[i], %(names)s[i]) that exist, their rows
-- locked in one order until the transaction ends (an apply's `expect`).
SELECT j.tenant_id, j.name, j.revision FROM jobs j
WHERE (j.tenant_id, j.name) IN (SELECT * FROM unnest(%(tenant_ids)s::text[], %(names)s::text[]))
  AND (%(scope)s::text IS NULL OR j.tenant_id = %(scope)s)
ORDER BY j.tenant_id, j.name
FOR UPDATE;

-- name: pause_job
UPDATE jobs SET
    paused = true,
    pause_note = %(note)s,
    status = CASE WHEN status IN ('running', 'done') THEN status ELSE 'paused' END,
    next_run_at = CASE WHEN status = 'running' THEN next_run_at
                       ELSE '9999-01-01Z'::timestamptz END,
    updated_at = now()
WHERE tenant_id = %(tenant_id)s AND name = %(name)s
  AND (%(scope)s::text IS NULL OR tenant_id = %(scope)s)
RETURNING id, shard_id, status;

-- name: pause_job_until
-- `pause --until`: an idle or paused job skips to its first slot at or after the time
-- (computed by the caller) and is idle again, so it resumes by itself; the slots between
-- are not run, as for a pause. A running job is left alone (no row): its completion
-- would plan over the pause.
UPDATE jobs SET
    paused = false,
    pause_note = %(note)s,
    paused_until = %(until)s,
    failed_slots = 0,
    status = 'idle',
    next_run_at = %(next_run_at)s,
    slot_at = %(slot_at)s,
    slot_origin = NULL,
    attempt = 1,
    updated_at = now()
WHERE tenant_id = %(tenant_id)s AND name = %(name)s AND status IN ('idle', 'paused')
  AND (%(scope)s::text IS NULL OR tenant_id = %(scope)s)
RETURNING id, shard_id, status;

-- name: skip_next_slots
-- `skip-next`: an idle job moves to the slot after those it skips, which the caller has
-- just recorded skipped (record_skips). No row: the job is not idle.
UPDATE jobs SET
    next_run_at = %(next_run_at)s,
    slot_at = %(slot_at)s,
    slot_origin = %(slot_origin)s,
    attempt = 1,
    updated_at = now()
WHERE tenant_id = %(tenant_id)s AND name = %(name)s AND status = 'idle'
  AND (%(scope)s::text IS NULL OR tenant_id = %(scope)s)
RETURNING id, shard_id, status;

-- name: record_skips
-- Slots a job owes (held at its gate, deferred, due) when a pause moves it past them, or
-- its next slots skip-next skips, recorded skipped (a JSON list of [slot, reason]) before
-- the job moves; a slot with a record keeps it (docs/design/gates.md). Through
-- record_skipped, as the owner: the web's role writes no runs
-- (migration `0.3.0_pre_web_skips_and_triggers`, docs/design/roles.md).
SELECT skipped_slot AS scheduled_for
FROM record_skipped(%(id)s, %(scope)s, %(skips)s::json, %(now)s::timestamptz);

-- name: may_write_runs
-- Whether this login inserts runs itself: record_skipped holds it to no slot's time.
SELECT has_table_privilege(session_user, 'runs', 'INSERT') AS may;

-- name: record_skips_each
-- record_skips for several jobs in one statement (an apply's batch): %(jobs)s, a JSON list
-- of {"id": job id, "skips": [[slot, reason], ...]}.
SELECT r.skipped_slot AS scheduled_for
FROM json_to_recordset(%(jobs)s::json) AS x(id uuid, skips json)
CROSS JOIN LATERAL record_skipped(x.id, %(scope)s, x.skips, %(now)s::timestamptz) AS r;

-- name: resume_job
-- A paused job (or one paused until a time still to come) continues at the schedule's next
-- future slot (computed by the caller); the slots it missed while paused are not run. A job
-- whose pause until a time is over is back on its schedule already: it keeps its slot (one
-- held at its gate included: test_a_resume_after_a_pause_until_keeps_the_slot_held_at_...).
UPDATE jobs SET
    paused = false,
    pause_note = NULL,
    failed_slots = 0,
    status = CASE WHEN status = 'paused' THEN 'idle' ELSE status END,
    (next_run_at, slot_at, slot_origin, attempt) = (
        SELECT CASE WHEN m.moves THEN %(next_run_at)s ELSE next_run_at END,
               CASE WHEN m.moves THEN %(slot_at)s ELSE slot_at END,
               CASE WHEN m.moves THEN NULL ELSE slot_origin END,
               CASE WHEN m.moves THEN 1 ELSE attempt END
        FROM (SELECT status = 'paused'
                     OR (status = 'idle'
                         AND paused_until > coalesce(%(now)s::timestamptz, now())) AS moves) m),
    paused_until = NULL,
    updated_at = now()
WHERE tenant_id = %(tenant_id)s AND name = %(name)s
  AND (%(scope)s::text IS NULL OR tenant_id = %(scope)s)
RETURNING id, shard_id, status;

-- name: trigger_job
-- Due now, for one extra slot stamped with the current time; the schedule goes on after
-- it. A due slot or pending retry is just brought forward; a paused job runs once and
-- stays paused (tests/integration/test_store.py).
UPDATE jobs SET
    status = 'idle',
    slot_origin = CASE WHEN status = 'paused' OR slot_at > n.t THEN 'trigger'
                       ELSE slot_origin END,
    slot_at = CASE WHEN status = 'paused' OR slot_at > n.t THEN n.t ELSE slot_at END,
    attempt = CASE WHEN status = 'paused' OR slot_at > n.t THEN 1 ELSE attempt END,
    next_run_at = CASE WHEN status = 'paused' OR next_run_at > n.t THEN n.t ELSE next_run_at END,
    updated_at = n.t
FROM (SELECT coalesce(%(now)s::timestamptz, now()) AS t) AS n
WHERE tenant_id = %(tenant_id)s AND name = %(name)s AND status <> 'running'
  AND (%(scope)s::text IS NULL OR tenant_id = %(scope)s)
RETURNING id, shard_id, slot_at;

-- name: cancel_job
-- Asks whoever runs the job's slot to cancel it: the given slot, or whichever is running;
-- an each-zone job's, each of its children's (they run its slots: docs/zones.md).
-- The request stays on the job row until the slot ends (every attempt of the slot sees it).
UPDATE jobs SET cancel_by = %(by)s
WHERE id IN (SELECT j.id FROM jobs j WHERE j.tenant_id = %(tenant_id)s AND j.name = %(name)s
             UNION ALL
             SELECT c.id FROM jobs p JOIN jobs c ON c.parent_id = p.id
             WHERE p.tenant_id = %(tenant_id)s AND p.name = %(name)s AND p.each_zone)
  AND status = 'running'
  AND (%(scope)s::text IS NULL OR tenant_id = %(scope)s)
  AND overlap <> 'allow'  -- its slots run as flights (cancel_flights)
  AND NOT each_node  -- its members' runs (cancel_node_runs)
  AND (%(slot)s::timestamptz IS NULL OR slot_at = %(slot)s)
RETURNING id, name, shard_id, slot_at, attempt, lease_token, locked_by, overlap;

-- name: remove_job
-- An each-zone job's children go with it, in the same transaction (release_children).
DELETE FROM jobs WHERE tenant_id = %(tenant_id)s AND name = %(name)s
    AND (%(scope)s::text IS NULL OR tenant_id = %(scope)s)
RETURNING id, shard_id, each_zone;

-- name: remove_jobs_except
-- An each-zone job's children (parent_id) are not in job files: they go with their parent,
-- in the same transaction (release_children).
DELETE FROM jobs
WHERE NOT ((tenant_id, name) IN (
    SELECT * FROM unnest(%(tenant_ids)s::text[], %(names)s::text[])))
  AND parent_id IS NULL
RETURNING id, tenant_id, name, each_zone;

-- name: notify
SELECT pg_notify(%(channel)s, %(payload)s);

-- name: notify_shards
-- One wake-up a shard of %(shards)s (Postgres folds equal notifications of a transaction).
SELECT pg_notify(%(channel)s, s::text) FROM unnest(%(shards)s::int[]) AS s;

-- name: lock_job_sync
-- Held until the syncing transaction ends: nodes started together sync jobs in turn.
SELECT pg_advisory_xact_lock(hashtext('pulse.sync-jobs'), hashtext(%(schema)s));

-- name: jobs_page
-- One page of jobs by (tenant, name) after the cursor; q matches the name or the handler as
-- it is shown (never inside a secret). The page is one row: its jobs as one JSON array
-- (each job as Job.to_json shows it, cluster/jobs/sqljson.py), how many, and the last
-- job's (tenant, name) for the next cursor. The JSON is built outside the LIMIT, so only
-- the page's rows pay for it whatever plan finds them.
SELECT count(*) AS found,
       '[' || coalesce(string_agg(row_to_json(x)::text, ', ' ORDER BY x.tenant, x.name), '')
           || ']' AS jobs,
       (array_agg(x.tenant ORDER BY x.tenant DESC, x.name DESC))[1] AS last_tenant,
       (array_agg(x.name ORDER BY x.tenant DESC, x.name DESC))[1] AS last_name
FROM (SELECT {job_json:j}
      FROM (SELECT * FROM jobs
            WHERE (%(scope)s::text IS NULL OR tenant_id = %(scope)s)
              AND (%(tenant_id)s::text IS NULL OR tenant_id = %(tenant_id)s)
              AND (%(status)s::text IS NULL OR status = %(status)s)
              AND (%(q)s::text IS NULL OR strpos(lower(name), lower(%(q)s)) > 0
                   OR strpos(lower(job_handler_shown(handler)), lower(%(q)s)) > 0)
              AND (%(labels)s::jsonb IS NULL OR labels @> %(labels)s::jsonb)
              AND (%(after_tenant)s::text IS NULL
                   OR (tenant_id, name) > (%(after_tenant)s::text, %(after_name)s::text))
            ORDER BY tenant_id, name
            LIMIT %(limit)s) AS j) AS x;

-- name: job_revisions
-- A job's revisions by (tenant, name), newest first, before %(before)s if given; those of
-- a job removed and created again continue one history (migration 029).
SELECT r.* FROM job_revisions r
WHERE r.tenant_id = %(tenant_id)s AND r.job_name = %(name)s
  AND (%(scope)s::text IS NULL OR r.tenant_id = %(scope)s)
  AND (%(before)s::int IS NULL OR r.revision < %(before)s)
ORDER BY r.revision DESC
LIMIT %(limit)s;

-- name: job_revision
SELECT r.* FROM job_revisions r
WHERE r.tenant_id = %(tenant_id)s AND r.job_name = %(name)s AND r.revision = %(revision)s
  AND (%(scope)s::text IS NULL OR r.tenant_id = %(scope)s);

-- name: job_masked_handler
-- The job's handler as its revisions record it (a literal password masked).
SELECT (job_definition(j)) ->> 'handler' AS handler FROM jobs j
WHERE j.tenant_id = %(tenant_id)s AND j.name = %(name)s
  AND (%(scope)s::text IS NULL OR j.tenant_id = %(scope)s);

-- name: nodes_without_each_node
-- Nodes of this cluster whose lock session (it holds a shard, probe or life lock in the
-- cluster's namespace) lacks the every-node mark (session.sql: lock_session_setup): a
-- release that would claim an every-node job as an ordinary one, on one node
-- (docs/design/each-node.md#rolling-upgrades). A node's life watch (`<node>/watch`) holds
-- a peer's life lock only a moment, and is no lock session.
SELECT DISTINCT coalesce(nullif(a.application_name, ''), 'pid ' || l.pid) AS node_id
FROM pg_locks l LEFT JOIN pg_stat_activity a ON a.pid = l.pid
WHERE l.locktype = 'advisory' AND l.granted AND l.classid = %(ns)s::int::oid
  AND l.objsubid = 2
  AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
  AND right(coalesce(a.application_name, ''), 6) <> '/watch'
  AND NOT EXISTS (SELECT 1 FROM pg_locks m
                  WHERE m.pid = l.pid AND m.locktype = 'advisory' AND m.granted
                    AND m.classid = l.classid AND m.objsubid = 2
                    AND m.objid::int = %(mark)s)
ORDER BY 1;
