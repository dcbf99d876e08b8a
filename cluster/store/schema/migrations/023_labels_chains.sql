-- Pulse schema, version 23: job labels and blackout windows by label (docs/design/labels.md),
-- and chained jobs, `@after:A` (docs/design/chains.md).
--
-- labels: a job's key=value labels as a JSON object of strings (`--label`). A window of
-- scope `label` covers the jobs whose label `label_key` is `label_value`, in one tenant
-- (tenant_id) or in every tenant (tenant_id NULL). Additive; the check on jobs is added NOT
-- VALID to spare a scan under lock (every existing row has the default, an empty object).

ALTER TABLE jobs ADD COLUMN labels jsonb NOT NULL DEFAULT '{}'::jsonb;
ALTER TABLE jobs ADD CONSTRAINT jobs_labels_check CHECK (jsonb_typeof(labels) = 'object')
    NOT VALID;

ALTER TABLE windows ADD COLUMN label_key text;
ALTER TABLE windows ADD COLUMN label_value text;
ALTER TABLE windows DROP CONSTRAINT windows_window_scope_check;
ALTER TABLE windows DROP CONSTRAINT windows_check1;
ALTER TABLE windows DROP CONSTRAINT windows_check2;
ALTER TABLE windows ADD CONSTRAINT windows_window_scope_check
    CHECK (window_scope IN ('job', 'tenant', 'cluster', 'label'));
ALTER TABLE windows ADD CONSTRAINT windows_tenant_check
    CHECK (CASE window_scope WHEN 'cluster' THEN tenant_id IS NULL
                             WHEN 'label' THEN true
                             ELSE tenant_id IS NOT NULL END);
ALTER TABLE windows ADD CONSTRAINT windows_job_check
    CHECK ((window_scope = 'job') = (job_name IS NOT NULL));
ALTER TABLE windows ADD CONSTRAINT windows_label_check
    CHECK ((window_scope = 'label') = (label_key IS NOT NULL AND label_value IS NOT NULL));

-- Chains: an edge of match `chain` makes each success of the upstream one slot of the
-- downstream, recorded in chain_slots by the upstream's fenced completion. Additive: a node
-- of the previous release completes a chained upstream without releasing; the downstream's
-- slot is then not made (run this release on every node before adding chained jobs).
ALTER TABLE job_edges DROP CONSTRAINT job_edges_match_check;
ALTER TABLE job_edges ADD CONSTRAINT job_edges_match_check
    CHECK (match IN ('same', 'latest', 'period:day', 'period:hour', 'chain'));

-- A chained job's slots (migration 023, docs/design/chains.md): each success of an upstream
-- slot of a `chain` edge writes (downstream, slot) here, in the statement of that upstream's
-- fenced completion; the downstream takes them oldest first (gate_hold). A row is written
-- once and never again (taken stays), so a second upstream of a fan-in, or a completion
-- replayed, makes no second slot.
CREATE TABLE chain_slots (
    job_id     uuid NOT NULL,
    slot       timestamptz NOT NULL,
    taken      boolean NOT NULL DEFAULT false,
    created_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (job_id, slot)
);
CREATE INDEX chain_slots_pending ON chain_slots (job_id) WHERE NOT taken;

-- Called by the fenced completion of a successful slot of `upstream` that feeds chained
-- jobs: records the slot for each, and has those idle with nothing to do take it at once
-- (rows locked this instant are left to the gate pass, chain_pull). Wakes their shards.
CREATE FUNCTION chain_release(upstream uuid, slot timestamptz,
                              at timestamptz DEFAULT now()) RETURNS integer
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
DECLARE
    started integer := 0;
    s integer;
BEGIN
    INSERT INTO chain_slots (job_id, slot, created_at)
    SELECT e.downstream_id, slot, at FROM job_edges e
    WHERE e.upstream_id = upstream AND e.match = 'chain'
    ON CONFLICT DO NOTHING;
    IF NOT FOUND THEN
        RETURN 0;
    END IF;
    FOR s IN
        WITH waiting AS (
            SELECT d.id FROM jobs d
            WHERE d.id IN (SELECT e.downstream_id FROM job_edges e
                           WHERE e.upstream_id = upstream AND e.match = 'chain')
              AND d.status = 'idle' AND NOT d.gate_wait
              AND d.next_run_at = '9999-01-01Z'::timestamptz
            FOR UPDATE OF d SKIP LOCKED
        )
        UPDATE jobs j SET next_run_at = '9998-01-01Z'::timestamptz, updated_at = at
        FROM waiting w WHERE j.id = w.id
        RETURNING CASE WHEN j.next_run_at < '9999-01-01Z'::timestamptz THEN j.shard_id END
    LOOP
        IF s IS NOT NULL THEN
            started := started + 1;
            PERFORM pg_notify(current_schema() || '_wake', s::text);
        END IF;
    END LOOP;
    RETURN started;
END $$;

-- The gate pass's part for chains: the chained jobs of `shards` idle with a slot released
-- but not taken (their row was locked at the release) take it.
CREATE FUNCTION chain_pull(shards integer[], at timestamptz DEFAULT now()) RETURNS integer
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
DECLARE
    started integer := 0;
    s integer;
BEGIN
    FOR s IN
        WITH waiting AS (
            SELECT d.id FROM jobs d
            WHERE d.id IN (SELECT c.job_id FROM chain_slots c WHERE NOT c.taken)
              AND d.shard_id = ANY(shards) AND d.status = 'idle' AND NOT d.gate_wait
              AND d.next_run_at = '9999-01-01Z'::timestamptz
            FOR UPDATE OF d SKIP LOCKED
        )
        UPDATE jobs j SET next_run_at = '9998-01-01Z'::timestamptz, updated_at = at
        FROM waiting w WHERE j.id = w.id
        RETURNING CASE WHEN j.next_run_at < '9999-01-01Z'::timestamptz THEN j.shard_id END
    LOOP
        IF s IS NOT NULL THEN
            started := started + 1;
            PERFORM pg_notify(current_schema() || '_wake', s::text);
        END IF;
    END LOOP;
    RETURN started;
END $$;

CREATE OR REPLACE FUNCTION forget_deleted_jobs_edges() RETURNS trigger
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
BEGIN
    DELETE FROM job_edges e USING deleted_jobs d
    WHERE e.downstream_id = d.id OR e.upstream_id = d.id;
    DELETE FROM chain_slots c USING deleted_jobs d WHERE c.job_id = d.id;
    RETURN NULL;
END
$$;

CREATE OR REPLACE FUNCTION gate_verdict(job uuid, slot timestamptz) RETURNS text
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
        IF e.match IN ('same', 'chain') THEN
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
