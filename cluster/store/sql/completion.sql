-- Results of the single-lease path, written by the node's result writer
-- (cluster/store/lock/writer.py, docs/design/completions.md).

-- name: complete
-- Fenced, batched completion: rows still running under the caller's lease token move to
-- their next slot, each attempt's run row is written (as record_run writes it), and the slots the catch-up
-- policy skipped are recorded. Returns the ids applied (tests/integration/test_history.py).
-- Alert events are written with the state they report (tests/integration/test_alert_events.py).
-- The clock is the statement's start, not its transaction's: a run that used
-- ctx.transaction() is completed inside it, which began when the handler's block did
-- (test_a_run_in_a_transaction_is_recorded_finished_when_it_completes). Alone in its
-- transaction, the statement starts with it.
WITH clock AS (
    SELECT coalesce(%(now)s::timestamptz, statement_timestamp()) AS t
),
-- One JSON text per batch, cheap for the client to encode: per completion [id, token,
-- slot, outcome, error, duration_us, next_run_at, next_slot or null, next_attempt,
-- output as JSON text or null, the next slot's origin or null, state as JSON text or null,
-- why its metrics failed the job's --assert or null] (cluster.store.lock.records.complete_params),
-- parsed once: as jsonb, whose elements are read by index, where json's `->>` parses
-- each element again for every field it reads.
input AS MATERIALIZED (
    SELECT (e->>0)::uuid AS id, (e->>1)::bigint AS token, (e->>2)::timestamptz AS slot,
           e->>3 AS outcome, e->>4 AS error, (e->>5)::bigint / 1e6::float8 AS duration_s,
           (e->>6)::timestamptz AS next_run_at,
           coalesce(e->>7, e->>6)::timestamptz AS next_slot,
           (e->>8)::int AS next_attempt, (e->>9)::jsonb AS output, e->>10 AS origin,
           (e->>11)::jsonb AS state, e->>12 AS assertion
    FROM jsonb_array_elements(%(done)s::jsonb) AS e
),
-- Per skip: [job id, slot, reason], and for one standing for unlisted slots the time from
-- which and how many (runs.skipped_from; records._skip_row); a sixth element, true: the
-- slot is written only if this completion pauses the job (`f.pause`), which then stops
-- short of it, and it counts in no `skipped` alert.
skip_in AS MATERIALIZED (
    SELECT (e->>0)::uuid AS job_id, (e->>1)::timestamptz AS slot, e->>2 AS reason,
           (e->>3)::timestamptz AS skipped_from, coalesce((e->>4)::int, 0) AS unlisted,
           coalesce((e->>5)::boolean, false) AS if_paused
    FROM jsonb_array_elements(%(skips)s::jsonb) AS e
),
-- The ids are an index condition: the planner, whose statistics saw few running jobs,
-- must not scan the table for them (test_lease_plans.py). `o` is the job row before this
-- update: its attempt and claim time belong to the attempt that ended. `f`: the slot's last
-- attempt failed (`fail`), which makes N failed slots in a row and auto-pauses (`pause`);
-- the attempt started late (`late`: the late pass reports slots not started yet); `skips`
-- slots were skipped (one `skipped` event per catch-up; a business calendar's planned
-- skips, reasons 'calendar ...', are neither catch-up nor an event); `expect_now`: the
-- job's health after this run, NULL for a job without expectations (migration 024).
-- `r`: what plans the job's slots changed after this attempt was claimed (migration
-- `0.3.0_pre_zzzzzzzzz_changed_while_running`), so the node's plan is not the job's: the
-- job goes to `r.slot` (starting at `r.start`) and the skips from `r.cut` on are not
-- written. An apply gave it a new timing (timing_from, when the slot does not wait for its
-- retry): it goes to the slot the apply planned (timing_slot, after the one that ran), and
-- no skip of the old timing's walk is written; a one-off whose run ended it runs at the new
-- time it was given (test_a_running_one_off_given_another_time_runs_at_it). A calendar or
-- window change rewrote its rule
-- (rule_changed_at): the skips its old rule recorded for slots after the change are not
-- written, and the job goes back to the first of them, whose claim decides it under the
-- rule in force.
done AS (
    UPDATE jobs j SET
        -- next_run_at 9999-01-01 (records.NEVER): a one-off job's slot has run for good.
        -- f.ends: the job's max_runs-th run ended (migration 022). A job made an each-zone
        -- parent while it ran (park_each_zone) stays never due, its retry too.
        status = CASE WHEN j.each_zone THEN CASE WHEN j.paused THEN 'paused' ELSE 'idle' END
                      WHEN coalesce(r.start, i.next_run_at) >= '9999-01-01Z'::timestamptz
                           OR f.ends THEN 'done'
                      WHEN j.paused OR f.pause THEN 'paused' ELSE 'idle' END,
        next_run_at = CASE WHEN j.paused OR f.pause OR f.ends OR j.each_zone
                           THEN '9999-01-01Z'::timestamptz
                           ELSE coalesce(r.start, i.next_run_at) END,
        runs_done = j.runs_done + f.counted::int,
        slot_at = coalesce(r.slot, i.next_slot),
        attempt = i.next_attempt,
        -- A retry keeps its slot's origin; a slot reached past skipped ones is catch-up's.
        slot_origin = CASE WHEN i.next_slot = i.slot AND i.outcome <> 'skipped'
                                THEN o.slot_origin
                           WHEN r.slot IS NOT NULL THEN NULL
                           WHEN i.origin IS NOT NULL THEN i.origin
                           WHEN f.skips > f.own::int THEN 'catch-up' END,
        last_run_at = CASE WHEN i.outcome = 'skipped' THEN j.last_run_at ELSE i.slot END,
        locked_by = NULL,
        locked_at = NULL,
        locked_zone = NULL,
        lease_expires_at = NULL,
        cancel_by = NULL,
        updated_at = k.t,
        failed_slots = CASE WHEN i.outcome = 'succeeded' THEN 0
                            ELSE j.failed_slots + f.fail::int END,
        paused = j.paused OR f.pause,
        pause_note = CASE WHEN f.pause THEN 'paused after ' || j.failed_slots + 1
            || ' failed slots in a row; last error: ' || coalesce(left(i.error, 300), '-')
            ELSE j.pause_note END,
        late_slot = CASE WHEN f.late THEN i.slot ELSE j.late_slot END,
        prev_slot = CASE WHEN i.next_slot <> i.slot THEN i.slot ELSE j.prev_slot END,
        last_success_at = CASE WHEN i.outcome = 'succeeded' THEN i.slot ELSE j.last_success_at END,
        -- Only a success moves the state: a retry, or a run whose lease was lost, reads
        -- the state the last success left (tests/integration/test_state.py).
        state = CASE WHEN i.outcome = 'succeeded' AND i.state IS NOT NULL THEN
                          nullif(i.state, '{}'::jsonb)
                     ELSE j.state END,
        expect_state = coalesce(f.expect_now, j.expect_state),
        expect_state_at = CASE WHEN f.expect_now IS NULL
                                    OR f.expect_now = 'ok' AND j.expect_state = 'ok'
                               THEN j.expect_state_at ELSE k.t END
    FROM input i JOIN jobs o ON o.id = i.id
    CROSS JOIN LATERAL (
        SELECT CASE WHEN m.timing THEN o.timing_slot ELSE m.ruled END AS slot,
               CASE WHEN m.timing THEN o.timing_start ELSE m.ruled END AS start,
               CASE WHEN m.timing THEN i.slot ELSE m.ruled END AS cut
        FROM (SELECT o.timing_from >= o.locked_at AND o.timing_slot > i.slot
                     -- not a retry, which keeps its slot (a one-off's end keeps it too)
                     AND (i.next_slot <> i.slot OR i.next_run_at >= '9999-01-01Z'::timestamptz)
                     AS timing,
                     CASE WHEN o.rule_changed_at >= o.locked_at THEN (
                         SELECT min(s.slot) FROM skip_in s
                         WHERE s.job_id = i.id AND s.slot > o.rule_changed_at
                           AND s.slot <> i.slot
                           AND (starts_with(s.reason, 'calendar ')
                                OR starts_with(s.reason, 'blackout window '))) END AS ruled
             ) AS m
    ) AS r
    CROSS JOIN LATERAL (
        SELECT x.*, x.fail AND NOT o.paused
                    AND coalesce(o.failed_slots + 1 >= o.pause_after_failures, false) AS pause,
                    x.counted AND coalesce(o.runs_done + 1 >= o.max_runs, false) AS ends,
                    CASE WHEN x.too_fast THEN 'too_fast'
                    WHEN i.assertion IS NOT NULL THEN 'assertion_failed'
                    -- A run the late pass found slow or overdue leaves that state.
                    WHEN i.outcome = 'succeeded' AND o.expect_slot IS DISTINCT FROM i.slot
                         AND num_nonnulls(o.expect_max_s, o.expect_min_s, o.deadline,
                                          o.expect_baseline, o.asserts) > 0 THEN 'ok'
               END AS expect_now
        FROM (SELECT i.outcome <> 'skipped' AND i.next_attempt = 1 AS counted,
                     i.outcome = 'succeeded' AND o.expect_min_s > i.duration_s AS too_fast,
                     i.outcome IN ('failed', 'timed_out') AND i.next_attempt <= o.attempt AS fail,
                     i.outcome <> 'skipped' AND o.late_slot IS DISTINCT FROM i.slot
                         AND o.locked_at > o.next_run_at + make_interval(secs => o.late_after_s)
                         AS late,
                     -- A skip standing for unlisted slots counts them too (skipped_from).
                     (i.outcome = 'skipped' AND NOT starts_with(coalesce(i.error, ''), 'calendar '))::int
                         + (SELECT count(*) + coalesce(sum(s.unlisted), 0) FROM skip_in s
                            WHERE s.job_id = i.id AND s.slot <> i.slot AND NOT s.if_paused
                              AND s.slot < coalesce(r.cut, 'infinity')
                              AND NOT starts_with(s.reason, 'calendar ')) AS skips,
                     (SELECT min(s.slot) FROM skip_in s
                      WHERE s.job_id = i.id AND NOT s.if_paused
                        AND s.slot < coalesce(r.cut, 'infinity')) AS first_skip,
                     -- A gate's or a handler's skip (pulsecron.Skip): neither catch-up's
                     -- nor a calendar's.
                     i.outcome = 'skipped' AND NOT coalesce(starts_with(i.error, 'missed by ')
                         OR starts_with(i.error, 'calendar '), true) AS own
             ) AS x
    ) AS f, clock k
    WHERE j.id = ANY(ARRAY(SELECT x.id FROM input x))
      AND j.id = i.id AND j.lease_token = i.token AND j.status = 'running'
    -- The run row of the attempt that ended: written by `history` below, set-wise, except
    -- for a job that feeds others, whose downstreams' gates and chains read it within
    -- this statement (gate_release, chain_release): written here, before they run.
    RETURNING j.id, j.tenant_id, j.name, i.slot, o.feeds, o.attempt, i.token, i.outcome,
              f.pause AS paused, r.cut,
              CASE WHEN i.outcome = 'skipped' THEN NULL ELSE o.locked_at END AS started_at,
              i.duration_s, i.error, i.output, o.slot_origin, o.run_revision,
              CASE WHEN o.feeds THEN record_run(j.id, j.tenant_id, j.name, i.slot, o.attempt,
                  %(node_id)s, %(zone)s, i.outcome, i.token,
                  CASE WHEN i.outcome = 'skipped' THEN NULL ELSE o.locked_at END,
                  k.t, i.duration_s, i.error, i.output, o.slot_origin, o.run_revision) END,
              CASE WHEN f.late THEN raise_alert('late', j.id, j.tenant_id, j.name, i.slot,
                  o.attempt, %(node_id)s, %(zone)s, NULL, 'started '
                  || round(extract(epoch FROM o.locked_at - o.next_run_at))
                  || 's after it was due (late after ' || o.late_after_s || 's)') END,
              CASE WHEN f.fail THEN raise_alert('failed', j.id, j.tenant_id, j.name, i.slot,
                  o.attempt, %(node_id)s, %(zone)s, i.error, NULL) END,
              CASE WHEN i.outcome = 'succeeded' AND o.failed_slots > 0 THEN raise_alert(
                  'recovered', j.id, j.tenant_id, j.name, i.slot, o.attempt, %(node_id)s,
                  %(zone)s, NULL, 'succeeded after ' || o.failed_slots || ' failed slots')
              END,
              CASE WHEN f.skips > 0 THEN raise_alert('skipped', j.id, j.tenant_id, j.name,
                  least(f.first_skip, CASE WHEN i.outcome = 'skipped' THEN i.slot END),
                  NULL, %(node_id)s, %(zone)s, NULL,
                  CASE WHEN f.skips = 1 AND f.own THEN '1 slot skipped: ' || i.error
                       ELSE f.skips || CASE WHEN f.skips = 1 THEN ' slot' ELSE ' slots' END
                           -- The reason of the first slot counted: catch-up's, or a
                           -- window's (tests/integration/test_fate_defects.py).
                           || (SELECT CASE WHEN starts_with(c.reason, 'missed by ')
                                           THEN ' skipped by catch-up ' || o.catch_up
                                           ELSE ' skipped: ' || c.reason END
                               FROM (SELECT i.slot, coalesce(i.error, '') AS reason
                                     WHERE i.outcome = 'skipped'
                                     UNION ALL
                                     SELECT s.slot, s.reason FROM skip_in s
                                     WHERE s.job_id = i.id AND s.slot <> i.slot
                                       AND NOT s.if_paused
                                       AND s.slot < coalesce(r.cut, 'infinity')) c
                               WHERE NOT starts_with(c.reason, 'calendar ')
                               ORDER BY c.slot LIMIT 1) END) END,
              CASE WHEN f.expect_now = 'too_fast' THEN raise_alert('too_fast', j.id,
                  j.tenant_id, j.name, i.slot, o.attempt, %(node_id)s, %(zone)s, NULL,
                  'ended after ' || round(i.duration_s::numeric, 3)::float8 || 's (expected at least '
                  || o.expect_min_s || 's)') END,
              CASE WHEN i.assertion IS NOT NULL THEN raise_alert('assertion_failed', j.id,
                  j.tenant_id, j.name, i.slot, o.attempt, %(node_id)s, %(zone)s, NULL,
                  'assertion failed: ' || i.assertion) END,
              CASE WHEN f.pause THEN raise_alert('paused', j.id, j.tenant_id, j.name, i.slot,
                  o.attempt, %(node_id)s, %(zone)s, i.error, j.pause_note) END,
              -- After record_run: the downstreams' gates read this run row (migration 021).
              -- A success makes one slot of each chained downstream (migration 023).
              CASE WHEN o.feeds AND i.outcome = 'succeeded' THEN chain_release(j.id, i.slot, k.t)
              END,
              CASE WHEN o.feeds THEN gate_release(j.id, NULL, k.t) END
),
-- What record_run writes (cluster/store/schema/schema.sql), for the jobs that feed nothing:
-- one insert for the batch instead of a function call per row
-- (tests/integration/test_history.py; with downstreams: test_gates.py, test_chains.py).
history AS (
    INSERT INTO runs AS r (job_id, tenant_id, job_name, scheduled_for, attempt, node_id, zone,
                           status, lease_token, started_at, finished_at, duration_s,
                           last_error, output, origin, revision)
    SELECT d.id, d.tenant_id, d.name, d.slot, d.attempt, %(node_id)s, %(zone)s, d.outcome,
           d.token, d.started_at, k.t, d.duration_s, d.error, d.output, d.slot_origin,
           d.run_revision
    FROM done d CROSS JOIN clock k
    WHERE NOT d.feeds
    ON CONFLICT (job_id, scheduled_for) DO UPDATE SET
        attempt = excluded.attempt,
        node_id = excluded.node_id,
        zone = excluded.zone,
        status = excluded.status,
        lease_token = excluded.lease_token,
        started_at = excluded.started_at,
        finished_at = excluded.finished_at,
        duration_s = excluded.duration_s,
        last_error = excluded.last_error,
        output = excluded.output,
        origin = excluded.origin,
        revision = excluded.revision
),
skipped AS (
    -- Never the completed slot itself: one statement cannot write a run row twice.
    INSERT INTO runs (job_id, tenant_id, job_name, scheduled_for, attempt, node_id, zone,
                      status, finished_at, last_error, skipped_from)
    SELECT d.id, d.tenant_id, d.name, s.slot, 1, %(node_id)s, %(zone)s, 'skipped', k.t,
           s.reason, s.skipped_from
    FROM skip_in s
    JOIN done d ON d.id = s.job_id AND d.slot <> s.slot AND (d.paused OR NOT s.if_paused)
                AND s.slot < coalesce(d.cut, 'infinity')
    CROSS JOIN clock k
    ON CONFLICT (job_id, scheduled_for) DO NOTHING
)
SELECT id FROM done;

-- name: remove_done_jobs
-- Deletes the given jobs that are done and asked to be removed then (`--remove-when-done`),
-- right after the completion that made them done; the pruner removes any this missed.
DELETE FROM jobs
WHERE id = ANY(%(ids)s::uuid[]) AND status = 'done' AND remove_when_done
RETURNING id;
