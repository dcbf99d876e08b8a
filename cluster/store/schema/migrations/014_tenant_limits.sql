-- Pulse schema, version 14: per-tenant limits of concurrent runs (docs/design/fairness.md).
--
-- A tenant with a limit has a row in tenant_limits, and its jobs and flights carry
-- `limited`, which gates the triggers below: the rows of other tenants never fire them, so
-- a cluster without limits pays nothing. A run holds one of its tenant's places from the
-- moment its row turns `running` until it leaves that status or is deleted.
--
-- Taking a place: the claim's update of a row to `running` fires tenant_take, which locks
-- the tenant's limits row with SKIP LOCKED (a claim never waits, so claims never deadlock),
-- folds the journal into `taken`, and refuses the row (the claim leaves it idle or queued)
-- if the tenant is at its limit or another claim holds its row this instant.
-- Freeing a place, and a flight born running (a slot an `allow` job hands over to a flight
-- while its job row gives back the place its claim took): tenant_moves journal rows, written without locking
-- anything, since a completion of many tenants' runs must never wait for a claim or
-- another completion. The exact count of places in use is taken + sum(tenant_moves.change).
-- A freed place of a tenant at its limit wakes the claim loops (NOTIFY <schema>_wake).
-- Additive: nodes of the previous release never set limits and ignore them.

CREATE TABLE tenant_limits (
    tenant_id      text PRIMARY KEY,
    max_concurrent integer NOT NULL CHECK (max_concurrent >= 1),
    taken          integer NOT NULL DEFAULT 0,
    updated_at     timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE tenant_moves (
    tenant_id text NOT NULL,
    change    integer NOT NULL CHECK (change IN (-1, 1))
);
CREATE INDEX tenant_moves_by_tenant ON tenant_moves (tenant_id);

-- A tenant's free places as a claim's snapshot sees them (no lock): the claim passes over
-- jobs beyond them, so a tenant at its limit never fills a claim meant for others.
CREATE VIEW tenant_room AS
SELECT l.tenant_id,
       l.max_concurrent - l.taken
           - coalesce((SELECT sum(m.change) FROM tenant_moves m
                       WHERE m.tenant_id = l.tenant_id), 0) AS room
FROM tenant_limits l;

-- Jobs of a tenant with a limit; flights carry the tenant itself, since a flight deleted
-- with its job can no longer look the job up.
ALTER TABLE jobs ADD COLUMN limited boolean NOT NULL DEFAULT false;
ALTER TABLE flights ADD COLUMN limit_tenant text;

-- Setting or clearing a tenant's limit (cluster/store/tenants.py) holds this lock
-- exclusively while it marks the tenant's rows; rows being inserted hold it shared, so a
-- job or flight added at that moment is marked too.
CREATE FUNCTION tenant_lock_key(tenant text) RETURNS bigint
LANGUAGE sql IMMUTABLE AS $$
    SELECT (hashtext('pulse.tenant')::bigint << 32) | (hashtext(tenant)::bigint & 4294967295)
$$;

-- One place for `tenant`: false at its limit, or while another claim holds its row.
CREATE FUNCTION tenant_take(tenant text) RETURNS boolean
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
DECLARE
    cap integer;
    used integer;
BEGIN
    SELECT l.max_concurrent, l.taken INTO cap, used
    FROM tenant_limits l WHERE l.tenant_id = tenant
    FOR UPDATE SKIP LOCKED;
    IF NOT FOUND THEN
        -- Held by another claim, or the limit was cleared after the row was marked.
        RETURN NOT EXISTS (SELECT 1 FROM tenant_limits l WHERE l.tenant_id = tenant);
    END IF;
    WITH folded AS (DELETE FROM tenant_moves m WHERE m.tenant_id = tenant RETURNING m.change)
    SELECT used + coalesce(sum(f.change), 0) INTO used FROM folded f;
    IF used < cap THEN
        UPDATE tenant_limits SET taken = used + 1 WHERE tenant_id = tenant;
        RETURN true;
    END IF;
    UPDATE tenant_limits SET taken = used WHERE tenant_id = tenant;
    RETURN false;
END $$;

-- A place given back; the first one a tenant at its limit gets back wakes the claim loops.
CREATE FUNCTION tenant_free(tenant text) RETURNS void
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
BEGIN
    INSERT INTO tenant_moves (tenant_id, change) VALUES (tenant, -1);
    IF EXISTS (SELECT 1 FROM tenant_room r WHERE r.tenant_id = tenant AND r.room = 1) THEN
        PERFORM pg_notify(current_schema() || '_wake', 'tenant');
    END IF;
END $$;

CREATE FUNCTION tenant_mark_job() RETURNS trigger
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
BEGIN
    PERFORM pg_advisory_xact_lock_shared(tenant_lock_key(NEW.tenant_id));
    NEW.limited := EXISTS (SELECT 1 FROM tenant_limits l WHERE l.tenant_id = NEW.tenant_id);
    RETURN NEW;
END $$;

CREATE FUNCTION tenant_mark_flight() RETURNS trigger
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
DECLARE
    tenant text;
BEGIN
    SELECT j.tenant_id INTO tenant FROM jobs j WHERE j.id = NEW.job_id;
    PERFORM pg_advisory_xact_lock_shared(tenant_lock_key(tenant));
    NEW.limit_tenant := (SELECT l.tenant_id FROM tenant_limits l WHERE l.tenant_id = tenant);
    RETURN NEW;
END $$;

-- After the insert, not before: a flight that ON CONFLICT DO NOTHING leaves out takes no
-- place.
CREATE FUNCTION tenant_flight_born() RETURNS trigger
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
BEGIN
    INSERT INTO tenant_moves (tenant_id, change) VALUES (NEW.limit_tenant, 1);
    RETURN NULL;
END $$;

-- The place triggers of both tables; TG_ARGV[0] names the row's tenant column (a job's
-- tenant_id, a flight's limit_tenant).
CREATE FUNCTION tenant_status() RETURNS trigger
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
DECLARE
    tenant text := to_jsonb(NEW) ->> TG_ARGV[0];
BEGIN
    IF NEW.status <> 'running' THEN
        PERFORM tenant_free(tenant);
    ELSIF NOT tenant_take(tenant) THEN
        RETURN NULL;
    END IF;
    RETURN NEW;
END $$;

CREATE FUNCTION tenant_deleted() RETURNS trigger
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
BEGIN
    PERFORM tenant_free(to_jsonb(OLD) ->> TG_ARGV[0]);
    RETURN NULL;
END $$;

CREATE TRIGGER tenant_mark BEFORE INSERT ON jobs
FOR EACH ROW EXECUTE FUNCTION tenant_mark_job();
CREATE TRIGGER tenant_mark BEFORE INSERT ON flights
FOR EACH ROW EXECUTE FUNCTION tenant_mark_flight();
CREATE TRIGGER tenant_place_born AFTER INSERT ON flights
FOR EACH ROW WHEN (NEW.limit_tenant IS NOT NULL AND NEW.status = 'running')
EXECUTE FUNCTION tenant_flight_born();
CREATE TRIGGER tenant_place BEFORE UPDATE OF status ON jobs
FOR EACH ROW WHEN (NEW.limited AND (OLD.status = 'running') <> (NEW.status = 'running'))
EXECUTE FUNCTION tenant_status('tenant_id');
CREATE TRIGGER tenant_place BEFORE UPDATE OF status ON flights
FOR EACH ROW
WHEN (NEW.limit_tenant IS NOT NULL AND (OLD.status = 'running') <> (NEW.status = 'running'))
EXECUTE FUNCTION tenant_status('limit_tenant');
CREATE TRIGGER tenant_place_deleted AFTER DELETE ON jobs
FOR EACH ROW WHEN (OLD.limited AND OLD.status = 'running')
EXECUTE FUNCTION tenant_deleted('tenant_id');
CREATE TRIGGER tenant_place_deleted AFTER DELETE ON flights
FOR EACH ROW WHEN (OLD.limit_tenant IS NOT NULL AND OLD.status = 'running')
EXECUTE FUNCTION tenant_deleted('limit_tenant');
