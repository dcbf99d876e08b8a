-- Pulse schema, version 31: every wait for an upstream has a bound (docs/design/gates.md).
--
-- gate_verdict says what is true of each upstream's matching slot (not run yet, running,
-- waiting for its retry, failed, skipped, never had), and an upstream slot that was skipped
-- or that the upstream moved past without running skips the downstream's slot with that
-- reason instead of holding it. gate_hold holds a slot at most its after-timeout, a day
-- without one (cluster.jobs.gates.DEFAULT_AFTER_TIMEOUT_S), and the slots held without a
-- bound get one here. Additive: no signature changes, and nodes of the previous release
-- call nothing new.

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
    -- with what it waited for (cluster.jobs.gates.DEFAULT_AFTER_TIMEOUT_S).
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
