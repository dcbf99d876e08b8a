-- Pulse schema, 0.3.0: named limits shared across jobs.
--
-- Revisions record `uses` from 0.3.0_pre_zz_revisions_record_uses on, which re-creates the
-- revision function after every migration of this release that does.
--
-- A key (limit_keys) caps the runs that use it at once (max_concurrent) and their starts per
-- period (rate: a bucket of `rate` tokens, each given back one period after it was taken).
-- A job names the keys it uses (jobs.uses); a run takes every one of them when its row turns
-- `running` and gives them back when it leaves that status, as a tenant's places do
-- (migration 014): the take locks the keys with SKIP LOCKED inside the claim's update and
-- refuses the row unless it gets all of them; a free is a journal row (limit_moves) written
-- without a lock. The key ids a running row holds are kept on it (holds), so a free never
-- resolves names again. Only rows with keys fire the triggers (WHEN on uses, holds): a
-- cluster without keys runs no function on its claim and completion paths.
-- Additive: nodes of the previous release neither read nor write these columns, and their
-- runs of jobs with keys still take and free them (the triggers are the database's).

CREATE TABLE limit_keys (
    id             bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    -- '' for a cluster-wide key, else the tenant whose own key it is (only its jobs use it).
    scope          text NOT NULL DEFAULT '',
    name           text NOT NULL CHECK (name <> ''),
    max_concurrent integer CHECK (max_concurrent >= 1),
    rate           integer CHECK (rate >= 1),
    per_s          integer CHECK (per_s >= 1),
    -- Runs holding the key, less the frees of limit_moves not yet folded in.
    taken          integer NOT NULL DEFAULT 0,
    -- The starts of the last period or so (a rate key's tokens out), in order.
    starts         timestamptz[] NOT NULL DEFAULT '{}',
    -- The latest end of a run that gave the key back, as folded in: a run that takes the
    -- key starts no earlier (its recorded start never precedes the end it waited for).
    freed_at       timestamptz,
    updated_at     timestamptz NOT NULL DEFAULT now(),
    UNIQUE (scope, name),
    CHECK (max_concurrent IS NOT NULL OR rate IS NOT NULL),
    CHECK ((rate IS NULL) = (per_s IS NULL))
);

CREATE TABLE limit_moves (
    key_id bigint NOT NULL,
    change integer NOT NULL CHECK (change IN (-1, 1)),
    at     timestamptz  -- a free: when the run ended
);
CREATE INDEX limit_moves_by_key ON limit_moves (key_id);

-- A slot that waited for a key: opened by the claim that passed it over (or a take refused),
-- ended by the take that let it run. `pulse jobs show` reads the open ones, `pulse audit`
-- all of them.
CREATE TABLE limit_waits (
    job_id   uuid NOT NULL,
    slot     timestamptz NOT NULL,
    key_name text NOT NULL,
    since    timestamptz NOT NULL,
    ended    timestamptz,
    PRIMARY KEY (job_id, slot)
);
CREATE INDEX limit_waits_open ON limit_waits (key_name) WHERE ended IS NULL;
-- Pruned with the runs they explain (prune_limit_waits), oldest first.
CREATE INDEX limit_waits_ended ON limit_waits (ended) WHERE ended IS NOT NULL;

-- The keys a job names: validated by uses_check; the ids its running row holds.
ALTER TABLE jobs ADD COLUMN uses text[] NOT NULL DEFAULT '{}';
ALTER TABLE jobs ADD COLUMN holds bigint[];
-- A flight's keys, resolved from its job's when it is made (NULL: none), and those it holds.
ALTER TABLE flights ADD COLUMN uses_keys bigint[];
ALTER TABLE flights ADD COLUMN holds bigint[];

-- A key's runs in flight and free places, as a snapshot sees them (no lock).
CREATE VIEW limit_room AS
SELECT l.id, l.scope, l.name,
       l.taken + coalesce((SELECT sum(m.change) FROM limit_moves m WHERE m.key_id = l.id), 0)
           AS running,
       l.max_concurrent - l.taken
           - coalesce((SELECT sum(m.change) FROM limit_moves m WHERE m.key_id = l.id), 0)
           AS room
FROM limit_keys l;

-- The ids of `names` for a job of `tenant` (its own key before a cluster-wide one of that
-- name), in id order; a name without a key is left out.
CREATE FUNCTION limit_resolve(tenant text, names text[]) RETURNS bigint[]
LANGUAGE sql STABLE SET search_path FROM CURRENT AS $$
    SELECT coalesce(array_agg(k.id ORDER BY k.id), '{}')
    FROM unnest(names) AS n(name)
    CROSS JOIN LATERAL (
        SELECT l.id FROM limit_keys l
        WHERE l.name = n.name AND l.scope IN ('', tenant)
        ORDER BY l.scope DESC LIMIT 1
    ) AS k
$$;

-- Starts a rate key counts against one at `at`: those within a period either side (a claim
-- ahead of its slot records a start later than the claims made meanwhile), so no window of
-- one period ever holds more than `rate` starts.
CREATE FUNCTION limit_starts_near(l limit_keys, at timestamptz) RETURNS integer
LANGUAGE sql IMMUTABLE AS $$
    SELECT count(*)::int FROM unnest(l.starts) AS s(t)
    WHERE s.t > at - make_interval(secs => l.per_s) AND s.t < at + make_interval(secs => l.per_s)
$$;

-- The first key of `ids` a run starting at `at` could not take now, as a snapshot sees it
-- (no lock); NULL: all have room. The claims pass such a job or flight over.
CREATE FUNCTION limit_ids_blocked(ids bigint[], at timestamptz) RETURNS text
LANGUAGE sql STABLE SET search_path FROM CURRENT AS $$
    SELECT l.name FROM limit_keys l JOIN limit_room r ON r.id = l.id
    WHERE l.id = ANY(ids)
      AND (r.room <= 0 OR (l.rate IS NOT NULL AND limit_starts_near(l, at) >= l.rate))
    ORDER BY l.id LIMIT 1
$$;

-- The same for the keys `names` of a job of `tenant`; a name without a key blocks.
CREATE FUNCTION limit_blocked(tenant text, names text[], at timestamptz) RETURNS text
LANGUAGE sql STABLE SET search_path FROM CURRENT AS $$
    SELECT coalesce(
        (SELECT n.name FROM unnest(names) AS n(name)
         WHERE NOT EXISTS (SELECT 1 FROM limit_keys l
                           WHERE l.name = n.name AND l.scope IN ('', tenant))
         LIMIT 1),
        limit_ids_blocked(limit_resolve(tenant, names), at))
$$;

-- Every key of `ids` for a run starting at `start_at`, or none: `refused` NULL when taken,
-- else the name of the key that refused; `start_at` moved to the latest end of a run that
-- gave one of them back, if later. The keys are locked with SKIP LOCKED, so a claim never
-- waits for another (no deadlock whatever the order of the keys); a key another claim holds
-- this instant refuses, and the row waits for a later claim. Locked, one statement folds
-- the journal in, checks every key and takes a place (and a token) of each only if all of
-- them have room: all or nothing. A rate key counts the starts within a period either side
-- of this one (a claim ahead of its slot records a start later than claims made meanwhile).
CREATE FUNCTION limit_take(ids bigint[], INOUT start_at timestamptz, OUT refused text)
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
DECLARE
    locked bigint[];
BEGIN
    SELECT coalesce(array_agg(x.id), '{}') INTO locked FROM (
        SELECT l.id FROM limit_keys l WHERE l.id = ANY(ids)
        ORDER BY l.id FOR NO KEY UPDATE SKIP LOCKED
    ) AS x;
    IF cardinality(locked) < cardinality(ids) THEN
        SELECT l.name INTO refused FROM limit_keys l
        WHERE l.id = ANY(ids) AND NOT l.id = ANY(locked) ORDER BY l.id LIMIT 1;
        refused := coalesce(refused, '?');
        RETURN;
    END IF;
    WITH folded AS (
        DELETE FROM limit_moves m WHERE m.key_id = ANY(ids)
        RETURNING m.key_id, m.change, m.at
    ),
    counted AS (
        SELECT l.id, l.name, l.max_concurrent, l.rate, l.per_s, l.starts,
               l.taken + coalesce(f.change, 0) AS taken, greatest(l.freed_at, f.at) AS freed_at
        FROM limit_keys l
        LEFT JOIN (SELECT folded.key_id, sum(folded.change)::int AS change,
                          max(folded.at) AS at
                   FROM folded GROUP BY folded.key_id) AS f ON f.key_id = l.id
        WHERE l.id = ANY(ids)
    ),
    started AS (
        SELECT greatest(start_at, max(c.freed_at)) AS t FROM counted c
    ),
    verdict AS (
        SELECT s.t, (
            SELECT c.name FROM counted c
            WHERE c.taken >= c.max_concurrent
               OR c.rate <= (SELECT count(*) FROM unnest(c.starts) AS x(t)
                             WHERE x.t > s.t - make_interval(secs => c.per_s)
                               AND x.t < s.t + make_interval(secs => c.per_s))
            ORDER BY c.id LIMIT 1) AS refused
        FROM started s
    ),
    written AS (
        UPDATE limit_keys l SET
            taken = c.taken + (v.refused IS NULL)::int,
            freed_at = c.freed_at,
            starts = CASE WHEN v.refused IS NOT NULL OR l.rate IS NULL THEN l.starts ELSE ARRAY(
                SELECT x.t FROM unnest(array_append(l.starts, v.t)) AS x(t)
                WHERE x.t > v.t - 2 * make_interval(secs => l.per_s) ORDER BY x.t) END
        FROM counted c CROSS JOIN verdict v
        WHERE l.id = c.id
    )
    SELECT v.t, v.refused INTO start_at, refused FROM verdict v;
END $$;

-- Keys given back by a run that ended at `ended` (a journal row each, no lock); a key that had
-- no room wakes the claim loops (NOTIFY <schema>_wake, 'limit').
CREATE FUNCTION limit_free(ids bigint[], ended timestamptz) RETURNS void
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
BEGIN
    INSERT INTO limit_moves (key_id, change, at) SELECT k, -1, ended FROM unnest(ids) AS k;
    IF EXISTS (SELECT 1 FROM limit_room r WHERE r.id = ANY(ids) AND r.room = 1) THEN
        PERFORM pg_notify(current_schema() || '_wake', 'limit');
    END IF;
END $$;

-- A job's `uses` names keys it may use: its tenant's own or cluster-wide ones (a key of
-- another tenant is unknown to it). Locked FOR KEY SHARE, so `pulse limits remove` (FOR
-- UPDATE) cannot remove a key while a job naming it is being written.
CREATE FUNCTION uses_check() RETURNS trigger
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
DECLARE
    n text;
BEGIN
    FOREACH n IN ARRAY NEW.uses LOOP
        PERFORM 1 FROM limit_keys l WHERE l.name = n AND l.scope IN ('', NEW.tenant_id)
        FOR KEY SHARE;
        IF NOT FOUND THEN
            RAISE EXCEPTION 'no limit key %', quote_literal(n)
                USING ERRCODE = 'check_violation', CONSTRAINT = 'limit_key', COLUMN = 'uses';
        END IF;
    END LOOP;
    RETURN NEW;
END $$;

-- A run of a job takes its keys (its locked_at, the run's recorded start, moved past the
-- end of the run whose key it took, if need be) or is refused: the claim leaves
-- it due, its wait recorded, and gives back the tenant's place that tenant_place took
-- (that trigger fires first, in name order). Leaving `running` gives the keys back.
CREATE FUNCTION uses_job_status() RETURNS trigger
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
DECLARE
    ids bigint[];
    started timestamptz;
    refused text;
BEGIN
    IF NEW.status <> 'running' THEN
        IF OLD.holds IS NOT NULL THEN
            -- Every statement that ends a run stamps updated_at with its clock.
            PERFORM limit_free(OLD.holds, NEW.updated_at);
        END IF;
        NEW.holds := NULL;
        RETURN NEW;
    END IF;
    ids := limit_resolve(NEW.tenant_id, NEW.uses);
    IF cardinality(ids) < cardinality(NEW.uses) THEN
        refused := limit_blocked(NEW.tenant_id, NEW.uses, NEW.locked_at);
    ELSE
        SELECT t.start_at, t.refused INTO started, refused FROM limit_take(ids, NEW.locked_at) AS t;
        NEW.locked_at := started;
    END IF;
    IF refused IS NOT NULL THEN
        -- Since the claim's clock (its updated_at).
        INSERT INTO limit_waits (job_id, slot, key_name, since)
        VALUES (NEW.id, NEW.slot_at, refused, NEW.updated_at) ON CONFLICT DO NOTHING;
        IF NEW.limited THEN
            PERFORM tenant_free(NEW.tenant_id);
        END IF;
        RETURN NULL;
    END IF;
    NEW.holds := ids;
    UPDATE limit_waits w SET ended = NEW.locked_at
    WHERE w.job_id = NEW.id AND w.slot = NEW.slot_at AND w.ended IS NULL;
    RETURN NEW;
END $$;

-- A flight's keys are its job's, resolved when it is made; one born running (an `allow`
-- job's claim hands its slot over, the job row giving its keys back) holds them at once.
CREATE FUNCTION uses_mark_flight() RETURNS trigger
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
BEGIN
    SELECT CASE WHEN j.uses = '{}' THEN NULL ELSE limit_resolve(j.tenant_id, j.uses) END
    INTO NEW.uses_keys FROM jobs j WHERE j.id = NEW.job_id;
    IF NEW.status = 'running' THEN
        NEW.holds := NEW.uses_keys;
    END IF;
    RETURN NEW;
END $$;

CREATE FUNCTION uses_flight_born() RETURNS trigger
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
BEGIN
    INSERT INTO limit_moves (key_id, change) SELECT k, 1 FROM unnest(NEW.holds) AS k;
    RETURN NULL;
END $$;

-- A flight has no clock column: its end is the statement's, no later than its lease.
CREATE FUNCTION uses_flight_status() RETURNS trigger
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
DECLARE
    started timestamptz;
    refused text;
BEGIN
    IF NEW.status <> 'running' THEN
        IF OLD.holds IS NOT NULL THEN
            PERFORM limit_free(OLD.holds, least(now(), OLD.lease_expires_at));
        END IF;
        NEW.holds := NULL;
        RETURN NEW;
    END IF;
    SELECT t.start_at, t.refused INTO started, refused
    FROM limit_take(NEW.uses_keys, NEW.locked_at) AS t;
    IF refused IS NOT NULL THEN
        -- Since the claim's clock (its locked_at).
        INSERT INTO limit_waits (job_id, slot, key_name, since)
        VALUES (NEW.job_id, NEW.slot, refused, NEW.locked_at) ON CONFLICT DO NOTHING;
        IF NEW.limit_tenant IS NOT NULL THEN
            PERFORM tenant_free(NEW.limit_tenant);
        END IF;
        RETURN NULL;
    END IF;
    NEW.locked_at := started;
    NEW.holds := NEW.uses_keys;
    UPDATE limit_waits w SET ended = NEW.locked_at
    WHERE w.job_id = NEW.job_id AND w.slot = NEW.slot AND w.ended IS NULL;
    RETURN NEW;
END $$;

CREATE FUNCTION uses_deleted() RETURNS trigger
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
BEGIN
    PERFORM limit_free(OLD.holds, least(now(), OLD.lease_expires_at));
    RETURN NULL;
END $$;

-- Named after tenant_place, so they fire after it (BEFORE triggers fire in name order).
CREATE TRIGGER uses_check BEFORE INSERT OR UPDATE OF uses ON jobs
FOR EACH ROW WHEN (NEW.uses <> '{}') EXECUTE FUNCTION uses_check();
CREATE TRIGGER uses_place BEFORE UPDATE OF status ON jobs
FOR EACH ROW WHEN ((NEW.uses <> '{}' OR OLD.holds IS NOT NULL)
                   AND (OLD.status = 'running') <> (NEW.status = 'running'))
EXECUTE FUNCTION uses_job_status();
CREATE TRIGGER uses_place_deleted AFTER DELETE ON jobs
FOR EACH ROW WHEN (OLD.holds IS NOT NULL AND OLD.status = 'running')
EXECUTE FUNCTION uses_deleted();
CREATE TRIGGER uses_mark BEFORE INSERT ON flights
FOR EACH ROW EXECUTE FUNCTION uses_mark_flight();
CREATE TRIGGER uses_place_born AFTER INSERT ON flights
FOR EACH ROW WHEN (NEW.holds IS NOT NULL AND NEW.status = 'running')
EXECUTE FUNCTION uses_flight_born();
CREATE TRIGGER uses_place BEFORE UPDATE OF status ON flights
FOR EACH ROW WHEN ((NEW.uses_keys IS NOT NULL OR OLD.holds IS NOT NULL)
                   AND (OLD.status = 'running') <> (NEW.status = 'running'))
EXECUTE FUNCTION uses_flight_status();
CREATE TRIGGER uses_place_deleted AFTER DELETE ON flights
FOR EACH ROW WHEN (OLD.holds IS NOT NULL AND OLD.status = 'running')
EXECUTE FUNCTION uses_deleted();

-- Their search_path: the schema, then pg_temp (0.3.0_pre_definer_search_path).
DO $$
DECLARE
    f text;
BEGIN
    FOREACH f IN ARRAY ARRAY['limit_resolve(text, text[])',
                             'limit_ids_blocked(bigint[], timestamptz)',
                             'limit_blocked(text, text[], timestamptz)',
                             'limit_take(bigint[], timestamptz)',
                             'limit_free(bigint[], timestamptz)',
                             'uses_check()', 'uses_job_status()', 'uses_mark_flight()',
                             'uses_flight_born()', 'uses_flight_status()', 'uses_deleted()']
    LOOP
        EXECUTE format('ALTER FUNCTION %s SET search_path = %I, pg_temp', f, current_schema());
    END LOOP;
END $$;
