-- Pulse schema, 0.2.0: every wait for an upstream has a bound, and the edges are part of a
-- job's revisions.
--
-- gate_verdict says what is true of each upstream's matching slot (not run yet, running,
-- waiting for its retry, failed, skipped, never had), and an upstream slot that was skipped
-- or that the upstream moved past without running skips the downstream's slot with that
-- reason instead of holding it. gate_hold holds a slot at most its after-timeout, a day
-- without one, and the slots held without a
-- bound get one here. job_definition records a job's upstreams (`after`, `after_match`);
-- job_revision_edges writes the revision of a change of edges, which the definition's
-- columns do not see. A removed job's edges go after its `removed` revision is written, so
-- that revision names its upstreams. Additive: no signature changes, and nodes of the
-- previous release call nothing new.

CREATE OR REPLACE FUNCTION gate_verdict(job uuid, slot timestamptz) RETURNS text
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
DECLARE
    d record;
    e record;
    r record;
    lo timestamptz;
    hi timestamptz;
    unit text;
    flight timestamptz;
    what text;
    waiting text;
BEGIN
    SELECT j.tz, j.after_failure INTO d FROM jobs j WHERE j.id = job;
    FOR e IN SELECT u.id, u.name, u.slot_at, u.status, u.paused, u.attempt, x.match,
                    starts_with(u.schedule, '@after:') AS chained
             FROM job_edges x JOIN jobs u ON u.id = x.upstream_id
             WHERE x.downstream_id = job ORDER BY u.name LOOP
        IF e.match LIKE 'period:%' THEN
            unit := split_part(e.match, ':', 2);
            lo := date_trunc(unit, slot AT TIME ZONE d.tz) AT TIME ZONE d.tz;
            hi := (date_trunc(unit, slot AT TIME ZONE d.tz) + ('1 ' || unit)::interval)
                  AT TIME ZONE d.tz;
        ELSE
            lo := slot;
            IF e.match = 'latest' THEN
                IF e.status <> 'done' AND e.slot_at <= slot THEN
                    lo := e.slot_at;  -- its latest slot at or before ours has not ended yet
                ELSE
                    SELECT max(m.s) INTO lo FROM (
                        SELECT max(x.scheduled_for) FROM runs x
                        WHERE x.job_id = e.id AND x.scheduled_for <= slot
                        UNION ALL
                        SELECT max(f.slot) FROM flights f
                        WHERE f.job_id = e.id AND f.slot <= gate_verdict.slot) AS m (s);
                    IF lo IS NULL THEN  -- it never will: its slots only move forward
                        RETURN format('skip: upstream %s has no slot at or before %s', e.name,
                            to_char(slot AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"'));
                    END IF;
                END IF;
            END IF;
            hi := lo + interval '1 microsecond';
        END IF;
        CONTINUE WHEN EXISTS (
            SELECT 1 FROM runs x
            WHERE x.job_id = e.id AND x.scheduled_for >= lo AND x.scheduled_for < hi
              AND x.status = 'succeeded');
        -- How the slot ended, if it did: a run still going first, then a failure, then a
        -- skip. And whether a flight (a backfill, a rerun, an `allow` slot) may still run it.
        SELECT x.scheduled_for, x.status, x.last_error INTO r FROM runs x
        WHERE x.job_id = e.id AND x.scheduled_for >= lo AND x.scheduled_for < hi
        ORDER BY x.status = 'running' DESC, x.status = 'skipped', x.scheduled_for DESC
        LIMIT 1;
        SELECT min(f.slot) INTO flight FROM flights f
        WHERE f.job_id = e.id AND f.slot >= lo AND f.slot < hi;
        -- Not ended: the upstream has not moved past the slot (a chained one, which has
        -- no clock to move by, until a record says so), or something still runs it.
        IF e.status <> 'done' AND e.slot_at < hi OR e.chained AND r.status IS NULL
           OR flight IS NOT NULL OR r.status = 'running' THEN
            what := CASE
                WHEN e.status = 'running' AND e.slot_at >= lo AND e.slot_at < hi
                    THEN format('upstream %s''s slot %s is running', e.name,
                        to_char(e.slot_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"'))
                WHEN flight IS NOT NULL OR r.status = 'running'
                    THEN format('upstream %s''s slot %s is queued or running', e.name,
                        to_char(coalesce(flight, r.scheduled_for) AT TIME ZONE 'UTC',
                                'YYYY-MM-DD"T"HH24:MI:SS"Z"'))
                WHEN e.attempt > 1 AND e.slot_at >= lo AND e.slot_at < hi
                    THEN format('upstream %s''s slot %s failed an attempt and waits for '
                        'its retry', e.name,
                        to_char(e.slot_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"'))
                WHEN e.match LIKE 'period:%'
                    THEN format('upstream %s has not succeeded in the %s from %s yet', e.name,
                        unit, to_char(lo AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"'))
                ELSE format('upstream %s''s slot %s has not run yet', e.name,
                        to_char(lo AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"'))
            END || CASE WHEN e.paused AND e.status <> 'running'
                        THEN format(' (%s is paused)', e.name) ELSE '' END;
            waiting := coalesce(waiting, what);
            CONTINUE;
        END IF;
        IF r.status IS NULL THEN  -- it moved past without a record: nothing will come
            RETURN 'skip: ' || CASE WHEN e.match LIKE 'period:%'
                THEN format('upstream %s had no slot in the %s from %s', e.name, unit,
                            to_char(lo AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"'))
                ELSE format('upstream %s''s slot %s never ran (%s moved past it)', e.name,
                            to_char(lo AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"'),
                            e.name) END;
        END IF;
        what := format('upstream %s''s slot %s', e.name,
                       to_char(r.scheduled_for AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"'));
        IF r.status = 'skipped' THEN  -- nothing ran upstream, so nothing follows
            RETURN 'skip: ' || what || ' was skipped' || coalesce(': ' || r.last_error, '');
        END IF;
        what := what || CASE r.status WHEN 'failed' THEN ' failed'
                                      WHEN 'timed_out' THEN ' timed out'
                                      WHEN 'cancelled' THEN ' was cancelled'
                                      ELSE ' was lost' END;
        IF d.after_failure = 'skip' THEN
            RETURN 'skip: ' || what;
        ELSIF d.after_failure = 'block' THEN
            waiting := coalesce(waiting, what);
        END IF;
    END LOOP;
    RETURN 'wait: ' || waiting;  -- NULL when nothing waits
END $$;

CREATE OR REPLACE FUNCTION gate_hold() RETURNS trigger
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
DECLARE
    pulled timestamptz;
BEGIN
    -- A chained job done with its slot asks for the next one released (9998-01-01,
    -- records.CHAINED_NEXT): the oldest not taken yet, due from now (updated_at).
    IF NEW.next_run_at = '9998-01-01Z'::timestamptz THEN
        UPDATE chain_slots c SET taken = true
        WHERE c.job_id = NEW.id AND c.slot = (
            SELECT min(x.slot) FROM chain_slots x WHERE x.job_id = NEW.id AND NOT x.taken)
        RETURNING c.slot INTO pulled;
        IF pulled IS NULL THEN  -- nothing released: it waits for its upstreams' next success
            NEW.next_run_at := '9999-01-01Z'::timestamptz;
            NEW.gate_wait := false;
            RETURN NEW;
        END IF;
        NEW.slot_at := pulled;
        NEW.attempt := 1;
        NEW.next_run_at := greatest(pulled, NEW.updated_at);
    END IF;
    -- Held at most its after-timeout, a day without one: then due, to be recorded skipped
    -- with what it waited for.
    IF gate_verdict(NEW.id, NEW.slot_at) LIKE 'wait: %' THEN
        NEW.gate_wait := true;
        NEW.next_run_at := greatest(NEW.next_run_at, NEW.slot_at
            + make_interval(secs => coalesce(NEW.after_timeout_s, 86400)));
    ELSE
        -- Opened by a statement that only asked again (an apply's gate settings) rather
        -- than releasing it at a time (gate_release): due at its slot, not at its bound.
        IF TG_OP = 'UPDATE' AND NEW.gate_wait AND NEW.next_run_at = OLD.next_run_at THEN
            NEW.next_run_at := NEW.slot_at;
        END IF;
        NEW.gate_wait := false;
    END IF;
    RETURN NEW;
END $$;

-- A slot held without a bound by an earlier release gets its bound (or is released).
UPDATE jobs SET next_run_at = slot_at
WHERE gate_wait AND status = 'idle' AND next_run_at >= '9999-01-01Z'::timestamptz;

-- The definition a revision records: the fields of a job file, as the row holds them, and
-- the job's upstreams (names, sorted) with their match rule.
CREATE OR REPLACE FUNCTION job_definition(j jobs) RETURNS jsonb
LANGUAGE sql STABLE SET search_path FROM CURRENT AS $$
    SELECT jsonb_build_object(
        'schedule', j.schedule, 'tz', j.tz, 'dst_repeated', j.dst_repeated,
        'dst_skipped', j.dst_skipped,
        'handler', regexp_replace(
            j.handler, '(://[^/@:"\s]*):(?!\$\{env:[A-Za-z_][A-Za-z0-9_]*\}@)[^@/"\s]+@',
            '\1:***@', 'g'),
        'payload', j.payload, 'paused', j.paused, 'catch_up', j.catch_up,
        'grace_s', j.grace_s, 'max_backfill', j.max_backfill, 'timeout_s', j.timeout_s,
        'max_retries', j.max_retries, 'retry_backoff_s', j.retry_backoff_s,
        'keep_for_s', j.keep_for_s, 'keep_runs', j.keep_runs, 'output_limit', j.output_limit,
        'late_after_s', j.late_after_s, 'pause_after_failures', j.pause_after_failures,
        'overlap', j.overlap, 'max_concurrent', j.max_concurrent,
        'cancel_grace_s', j.cancel_grace_s, 'jitter_s', j.jitter_s,
        'remove_when_done', j.remove_when_done, 'calendar', j.calendar,
        'on_excluded', j.on_excluded, 'business_day', j.business_day, 'zones', j.zones,
        'each_zone', j.each_zone, 'after_timeout_s', j.after_timeout_s,
        'after_failure', j.after_failure, 'max_runs', j.max_runs, 'labels', j.labels,
        'expect_max_s', j.expect_max_s, 'expect_min_s', j.expect_min_s,
        'deadline', j.deadline, 'expect_baseline', j.expect_baseline, 'asserts', j.asserts,
        'assert_fails', j.assert_fails, 'watch', j.watch, 'adopt_at', j.adopt_at,
        'payload_schema', j.payload_schema)
    || (SELECT jsonb_build_object(
                   'after', coalesce(jsonb_agg(u.name ORDER BY u.name), '[]'::jsonb),
                   'after_match', min(e.match))
        FROM job_edges e JOIN jobs u ON u.id = e.upstream_id
        WHERE e.downstream_id = j.id)
$$;

-- Called by an apply that changed a job's edges, after writing them (`before`: the job's
-- definition before): folds the change into the revision this transaction wrote, or writes
-- a new one. Edges are not columns of jobs, so the update triggers cannot see them.
CREATE FUNCTION job_revision_edges(job uuid, before jsonb) RETURNS integer
LANGUAGE plpgsql SECURITY DEFINER SET search_path FROM CURRENT AS $$
DECLARE
    j jobs;
    after jsonb;
BEGIN
    SELECT * INTO j FROM jobs x WHERE x.id = job;
    IF NOT FOUND OR j.parent_id IS NOT NULL THEN
        RETURN NULL;
    END IF;
    after := job_definition(j);
    IF after = before THEN
        RETURN j.revision;
    END IF;
    UPDATE job_revisions r SET
        definition = after,
        diff = job_definition_diff(
            CASE WHEN r.change = 'created' THEN NULL
                 ELSE r.definition || (SELECT coalesce(jsonb_object_agg(k, r.diff -> k -> 0), '{}')
                                       FROM jsonb_object_keys(r.diff) AS k) END,
            after)
    WHERE r.tenant_id = j.tenant_id AND r.job_name = j.name AND r.revision = j.revision
      AND r.xact = pg_current_xact_id();
    IF FOUND THEN
        RETURN j.revision;
    END IF;
    INSERT INTO job_revisions (tenant_id, job_name, revision, job_id, change, who, how,
                               definition, diff)
    VALUES (j.tenant_id, j.name, j.revision + 1, j.id, 'updated', job_revision_who(),
            job_revision_how(), after, job_definition_diff(before, after));
    UPDATE jobs x SET revision = j.revision + 1 WHERE x.id = job;
    RETURN j.revision + 1;
END
$$;

-- After jobs_revision_removed (triggers fire in name order): the `removed` revision still
-- sees the job's edges.
ALTER TRIGGER jobs_forget_edges ON jobs RENAME TO jobs_unlink_edges;
