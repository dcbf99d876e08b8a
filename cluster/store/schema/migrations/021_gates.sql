-- Pulse schema, version 21: slot-aligned dependencies between jobs (docs/design/gates.md).
--
-- A job with upstreams (`after`) is `gated`: whenever a statement sets its next slot, the
-- trigger below asks gate_verdict whether each upstream's matching slot succeeded, and if
-- not holds the slot out of the due range (next_run_at at its after-timeout, or 9999-01-01)
-- with gate_wait set. A held slot is not due, so it holds no claim back. An upstream's
-- fenced completion calls gate_release in the statement that writes its run row, which
-- re-asks for each held downstream. Jobs without edges never fire the trigger (WHEN).
-- Additive: nodes of the previous release never set `gated`; their completions do not
-- release, which the gate pass of a node of this release does (node/maintenance/gates.py).

ALTER TABLE jobs ADD COLUMN gated boolean NOT NULL DEFAULT false;
ALTER TABLE jobs ADD COLUMN feeds boolean NOT NULL DEFAULT false;
ALTER TABLE jobs ADD COLUMN gate_wait boolean NOT NULL DEFAULT false;
ALTER TABLE jobs ADD COLUMN after_timeout_s double precision CHECK (after_timeout_s > 0);
ALTER TABLE jobs ADD COLUMN after_failure text NOT NULL DEFAULT 'block'
    CHECK (after_failure IN ('block', 'run', 'skip'));

-- Incremental runs: what a handler is told at claim. prev_slot: the slot the job handled
-- before its current one; last_success_at: its newest slot that succeeded; state: the
-- small JSON object its last successful run left, written by the fenced completion.
ALTER TABLE jobs ADD COLUMN prev_slot timestamptz;
ALTER TABLE jobs ADD COLUMN last_success_at timestamptz;
ALTER TABLE jobs ADD COLUMN state jsonb;

-- An edge: `downstream_id` runs a slot only after the slot of `upstream_id` that `match`
-- names succeeded: same, latest, period:day or period:hour (in the downstream's zone).
-- No foreign keys: their triggers would check every update of every job (as for runs,
-- migration 004); a statement trigger drops the edges of deleted jobs instead.
CREATE TABLE job_edges (
    downstream_id uuid NOT NULL,
    upstream_id   uuid NOT NULL,
    match         text NOT NULL
                  CHECK (match IN ('same', 'latest', 'period:day', 'period:hour')),
    PRIMARY KEY (downstream_id, upstream_id),
    CHECK (downstream_id <> upstream_id)
);
CREATE INDEX job_edges_upstream ON job_edges (upstream_id);

CREATE FUNCTION forget_deleted_jobs_edges() RETURNS trigger
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
BEGIN
    DELETE FROM job_edges e USING deleted_jobs d
    WHERE e.downstream_id = d.id OR e.upstream_id = d.id;
    RETURN NULL;
END
$$;

CREATE TRIGGER jobs_forget_edges AFTER DELETE ON jobs
REFERENCING OLD TABLE AS deleted_jobs
FOR EACH STATEMENT EXECUTE FUNCTION forget_deleted_jobs_edges();
-- The gate pass reads the held jobs of its shards: a probe, not a scan of every job.
CREATE INDEX jobs_gate_wait ON jobs (shard_id) WHERE gate_wait;

-- NULL when every upstream's matching slot succeeded (or failed, under after-failure
-- `run`); 'skip: <why>' when one failed under `skip`; else 'wait: <why>'. Volatile: it
-- reads the runs and slots as they are now, not as the calling statement began.
CREATE FUNCTION gate_verdict(job uuid, slot timestamptz) RETURNS text
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
DECLARE
    d record;
    e record;
    lo timestamptz;
    hi timestamptz;
    unit text;
    why text;
    waiting text;
BEGIN
    SELECT j.tz, j.after_failure INTO d FROM jobs j WHERE j.id = job;
    FOR e IN SELECT u.id, u.name, u.slot_at, u.status, x.match
             FROM job_edges x JOIN jobs u ON u.id = x.upstream_id
             WHERE x.downstream_id = job ORDER BY u.name LOOP
        IF e.match = 'same' THEN
            lo := slot;
        ELSIF e.match = 'latest' THEN
            IF e.status <> 'done' AND e.slot_at <= slot THEN
                lo := e.slot_at;  -- its latest slot at or before ours has not ended yet
            ELSE
                SELECT max(r.scheduled_for) INTO lo FROM runs r
                WHERE r.job_id = e.id AND r.scheduled_for <= slot;
                IF lo IS NULL THEN
                    why := format('upstream %s has no slot at or before %s', e.name,
                                  to_char(slot AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"'));
                    IF d.after_failure = 'skip' THEN RETURN 'skip: ' || why; END IF;
                    IF d.after_failure = 'block' THEN waiting := coalesce(waiting, why); END IF;
                    CONTINUE;
                END IF;
            END IF;
        END IF;
        IF e.match LIKE 'period:%' THEN
            unit := split_part(e.match, ':', 2);
            lo := date_trunc(unit, slot AT TIME ZONE d.tz) AT TIME ZONE d.tz;
            hi := (date_trunc(unit, slot AT TIME ZONE d.tz) + ('1 ' || unit)::interval)
                  AT TIME ZONE d.tz;
            why := format('upstream %s had no successful slot in the %s from %s', e.name,
                          unit, to_char(lo AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"'));
        ELSE
            hi := lo + interval '1 microsecond';
            why := format('upstream %s slot %s did not succeed', e.name,
                          to_char(lo AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"'));
        END IF;
        CONTINUE WHEN EXISTS (
            SELECT 1 FROM runs r
            WHERE r.job_id = e.id AND r.scheduled_for >= lo AND r.scheduled_for < hi
              AND r.status = 'succeeded');
        IF e.status <> 'done' AND e.slot_at < hi THEN  -- the upstream has not moved past it
            waiting := coalesce(waiting, why);
        ELSIF d.after_failure = 'skip' THEN
            RETURN 'skip: ' || why;
        ELSIF d.after_failure = 'block' THEN
            waiting := coalesce(waiting, why);
        END IF;
    END LOOP;
    RETURN 'wait: ' || waiting;  -- NULL when nothing waits
END $$;

-- A gated job's slot set by any statement: held out of the due range while it waits.
CREATE FUNCTION gate_hold() RETURNS trigger
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
BEGIN
    IF gate_verdict(NEW.id, NEW.slot_at) LIKE 'wait: %' THEN
        NEW.gate_wait := true;
        NEW.next_run_at := CASE WHEN NEW.after_timeout_s IS NULL
            THEN '9999-01-01Z'::timestamptz
            ELSE greatest(NEW.next_run_at,
                          NEW.slot_at + make_interval(secs => NEW.after_timeout_s)) END;
    ELSE
        NEW.gate_wait := false;
    END IF;
    RETURN NEW;
END $$;

CREATE TRIGGER jobs_gate_hold BEFORE INSERT OR UPDATE OF next_run_at ON jobs
FOR EACH ROW WHEN (NEW.gated AND NEW.status = 'idle' AND NEW.next_run_at < '9999-01-01Z')
EXECUTE FUNCTION gate_hold();

-- Releases the held downstreams of `upstream` whose gate now opens (its completion, or the
-- gate pass when `upstream` is NULL: every held job of `shards`). Only those are locked, so
-- a pass never holds a row a completion is releasing; a row locked this instant is left to
-- the gate pass, so a completion never waits for a claim. A released slot is due from
-- `at`: its lateness (the late pass, `late` alerts) counts from its release, not from a
-- slot it could not start before. Wakes the released shards.
CREATE FUNCTION gate_release(upstream uuid, shards integer[] DEFAULT NULL,
                             at timestamptz DEFAULT now()) RETURNS integer
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
DECLARE
    released integer := 0;
    s integer;
BEGIN
    FOR s IN
        WITH held AS (
            SELECT d.id FROM jobs d
            WHERE d.gate_wait AND d.status = 'idle'
              AND (upstream IS NULL OR d.id IN (
                  SELECT e.downstream_id FROM job_edges e WHERE e.upstream_id = upstream))
              AND (shards IS NULL OR d.shard_id = ANY(shards))
              AND coalesce(gate_verdict(d.id, d.slot_at) NOT LIKE 'wait: %', true)
            FOR UPDATE OF d SKIP LOCKED
        )
        UPDATE jobs j SET next_run_at = greatest(j.slot_at, at), updated_at = at
        FROM held h WHERE j.id = h.id
        RETURNING CASE WHEN NOT j.gate_wait THEN j.shard_id END
    LOOP
        IF s IS NOT NULL THEN
            released := released + 1;
            PERFORM pg_notify(current_schema() || '_wake', s::text);
        END IF;
    END LOOP;
    RETURN released;
END $$;
