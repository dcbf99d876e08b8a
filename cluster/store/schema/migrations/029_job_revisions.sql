-- Pulse schema, version 29: job revisions (docs/design/revisions.md).
--
-- Every change to a job's definition writes a job_revisions row in the transaction that
-- makes it, whatever made it (the CLI, a job file, a module, --sync-jobs, the API, SQL):
-- triggers on jobs do it, so no write path can forget. Who and how come from the
-- settings pulse.who and pulse.how the writer gave its connection (JobStore.act_as),
-- else the connection's application_name and 'sql'. Revisions are numbered per
-- (tenant, name), so a job removed and created again continues its history. A run row
-- records the revision its slot was claimed under: the claim copies jobs.revision into
-- jobs.run_revision (one more column of the same update), a flight takes it when it is
-- made. The claim writes none of the columns the update trigger names: it never fires it.
-- Additive: nodes of the previous release keep calling record_run without a revision,
-- and their runs have none.

ALTER TABLE jobs ADD COLUMN revision integer NOT NULL DEFAULT 1;
ALTER TABLE jobs ADD COLUMN run_revision integer;
ALTER TABLE flights ADD COLUMN revision integer;
ALTER TABLE runs ADD COLUMN revision integer;

-- change: created, updated, removed. definition: the job's definition after the change
-- (before it, for `removed`), diff: {field: [before, after]} of the fields that changed.
-- A literal password in a handler's URL is masked in both; ${env:NAME} stays as written.
CREATE TABLE job_revisions (
    tenant_id   text NOT NULL,
    job_name    text NOT NULL,
    revision    integer NOT NULL CHECK (revision >= 1),
    job_id      uuid NOT NULL,
    change      text NOT NULL CHECK (change IN ('created', 'updated', 'removed')),
    at          timestamptz NOT NULL DEFAULT now(),
    who         text NOT NULL,
    how         text NOT NULL,
    definition  jsonb NOT NULL,
    diff        jsonb NOT NULL,
    -- The transaction that wrote it: later statements of the same transaction (an apply
    -- moving the job to its zones' shard) fold their change into it.
    xact        xid8 NOT NULL DEFAULT pg_current_xact_id(),
    PRIMARY KEY (tenant_id, job_name, revision)
);

-- Retention finds the names whose last revision removed the job (docs/retention.md).
CREATE INDEX job_revisions_removed ON job_revisions (at) WHERE change = 'removed';

-- The definition a revision records: the fields of a job file, as the row holds them.
CREATE FUNCTION job_definition(j jobs) RETURNS jsonb
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
$$;

-- {field: [before, after]} for each field of two definitions that differs.
CREATE FUNCTION job_definition_diff(before jsonb, after jsonb) RETURNS jsonb
LANGUAGE sql IMMUTABLE AS $$
    SELECT coalesce(jsonb_object_agg(k, jsonb_build_array(before -> k, after -> k)), '{}')
    FROM jsonb_object_keys(coalesce(after, before)) AS k
    WHERE (before -> k) IS DISTINCT FROM (after -> k)
$$;

CREATE FUNCTION job_revision_who() RETURNS text
LANGUAGE sql STABLE AS $$
    SELECT coalesce(nullif(current_setting('pulse.who', true), ''),
                    nullif(current_setting('application_name'), ''), session_user)
$$;

CREATE FUNCTION job_revision_how() RETURNS text
LANGUAGE sql STABLE AS $$
    SELECT coalesce(nullif(current_setting('pulse.how', true), ''), 'sql')
$$;

-- A new job's number follows the last of its name. Set before the insert (an upsert's
-- insert that meets a conflict becomes an update and writes no `created` row).
CREATE FUNCTION job_revision_number() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path FROM CURRENT AS $$
BEGIN
    NEW.revision := coalesce((SELECT max(r.revision) FROM job_revisions r
                              WHERE r.tenant_id = NEW.tenant_id AND r.job_name = NEW.name),
                             0) + 1;
    RETURN NEW;
END
$$;

-- SECURITY DEFINER: the roles that change jobs write revisions only through these.
CREATE FUNCTION job_revision_created() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path FROM CURRENT AS $$
BEGIN
    INSERT INTO job_revisions (tenant_id, job_name, revision, job_id, change, who, how,
                               definition, diff)
    SELECT n.tenant_id, n.name, n.revision, n.id, 'created', job_revision_who(),
           job_revision_how(), job_definition(n), job_definition_diff(NULL, job_definition(n))
    FROM created_jobs n WHERE n.parent_id IS NULL;
    RETURN NULL;
END
$$;

CREATE FUNCTION job_revision_updated() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path FROM CURRENT AS $$
DECLARE
    before jsonb := job_definition(OLD);
    after jsonb := job_definition(NEW);
BEGIN
    -- Both triggers below fire for a statement that pauses and changes more: one row.
    IF before = after OR NEW.revision <> OLD.revision THEN
        RETURN NEW;
    END IF;
    -- A revision this transaction wrote already takes the change in: one per apply.
    UPDATE job_revisions r SET
        definition = after,
        diff = job_definition_diff(
            CASE WHEN r.change = 'created' THEN NULL
                 ELSE r.definition || (SELECT coalesce(jsonb_object_agg(k, r.diff -> k -> 0), '{}')
                                       FROM jsonb_object_keys(r.diff) AS k) END,
            after)
    WHERE r.tenant_id = NEW.tenant_id AND r.job_name = NEW.name AND r.revision = OLD.revision
      AND r.xact = pg_current_xact_id();
    IF FOUND THEN
        RETURN NEW;
    END IF;
    NEW.revision := OLD.revision + 1;
    INSERT INTO job_revisions (tenant_id, job_name, revision, job_id, change, who, how,
                               definition, diff)
    VALUES (NEW.tenant_id, NEW.name, NEW.revision, NEW.id, 'updated', job_revision_who(),
            job_revision_how(), after, job_definition_diff(before, after));
    RETURN NEW;
END
$$;

CREATE FUNCTION job_revision_removed() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path FROM CURRENT AS $$
BEGIN
    INSERT INTO job_revisions (tenant_id, job_name, revision, job_id, change, who, how,
                               definition, diff)
    SELECT o.tenant_id, o.name, o.revision + 1, o.id, 'removed', job_revision_who(),
           job_revision_how(), job_definition(o), job_definition_diff(job_definition(o), NULL)
    FROM removed_jobs o WHERE o.parent_id IS NULL;
    RETURN NULL;
END
$$;

CREATE TRIGGER jobs_revision_number BEFORE INSERT ON jobs
FOR EACH ROW WHEN (NEW.parent_id IS NULL) EXECUTE FUNCTION job_revision_number();
CREATE TRIGGER jobs_revision_created AFTER INSERT ON jobs
REFERENCING NEW TABLE AS created_jobs
FOR EACH STATEMENT EXECUTE FUNCTION job_revision_created();
-- Only statements that set a field of the definition, and only rows whose fields changed.
-- The claim sets none of them: never considered. A completion sets `paused` alone among
-- them (auto-pause), so `paused` has a trigger of its own, whose WHEN compares one column.
CREATE TRIGGER jobs_revision_paused BEFORE UPDATE OF paused ON jobs
FOR EACH ROW WHEN (NEW.parent_id IS NULL AND OLD.paused <> NEW.paused)
EXECUTE FUNCTION job_revision_updated();
CREATE TRIGGER jobs_revision_updated BEFORE UPDATE OF
    schedule, tz, dst_repeated, dst_skipped, handler, payload, catch_up, grace_s,
    max_backfill, timeout_s, max_retries, retry_backoff_s, keep_for_s, keep_runs,
    output_limit, late_after_s, pause_after_failures, overlap, max_concurrent,
    cancel_grace_s, jitter_s, remove_when_done, calendar, on_excluded, business_day, zones,
    each_zone, after_timeout_s, after_failure, max_runs, labels, expect_max_s, expect_min_s,
    deadline, expect_baseline, asserts, assert_fails, watch, adopt_at, payload_schema ON jobs
FOR EACH ROW WHEN (NEW.parent_id IS NULL AND (
    OLD.schedule, OLD.tz, OLD.dst_repeated, OLD.dst_skipped, OLD.handler, OLD.payload,
    OLD.catch_up, OLD.grace_s, OLD.max_backfill, OLD.timeout_s, OLD.max_retries,
    OLD.retry_backoff_s, OLD.keep_for_s, OLD.keep_runs, OLD.output_limit, OLD.late_after_s,
    OLD.pause_after_failures, OLD.overlap, OLD.max_concurrent, OLD.cancel_grace_s,
    OLD.jitter_s, OLD.remove_when_done, OLD.calendar, OLD.on_excluded, OLD.business_day,
    OLD.zones, OLD.each_zone, OLD.after_timeout_s, OLD.after_failure, OLD.max_runs,
    OLD.labels, OLD.expect_max_s, OLD.expect_min_s, OLD.deadline, OLD.expect_baseline,
    OLD.asserts, OLD.assert_fails, OLD.watch, OLD.adopt_at, OLD.payload_schema)
    IS DISTINCT FROM (
    NEW.schedule, NEW.tz, NEW.dst_repeated, NEW.dst_skipped, NEW.handler, NEW.payload,
    NEW.catch_up, NEW.grace_s, NEW.max_backfill, NEW.timeout_s, NEW.max_retries,
    NEW.retry_backoff_s, NEW.keep_for_s, NEW.keep_runs, NEW.output_limit, NEW.late_after_s,
    NEW.pause_after_failures, NEW.overlap, NEW.max_concurrent, NEW.cancel_grace_s,
    NEW.jitter_s, NEW.remove_when_done, NEW.calendar, NEW.on_excluded, NEW.business_day,
    NEW.zones, NEW.each_zone, NEW.after_timeout_s, NEW.after_failure, NEW.max_runs,
    NEW.labels, NEW.expect_max_s, NEW.expect_min_s, NEW.deadline, NEW.expect_baseline,
    NEW.asserts, NEW.assert_fails, NEW.watch, NEW.adopt_at, NEW.payload_schema))
EXECUTE FUNCTION job_revision_updated();
CREATE TRIGGER jobs_revision_removed AFTER DELETE ON jobs
REFERENCING OLD TABLE AS removed_jobs
FOR EACH STATEMENT EXECUTE FUNCTION job_revision_removed();

-- The jobs that exist now start their history at revision 1.
INSERT INTO job_revisions (tenant_id, job_name, revision, job_id, change, who, how,
                           definition, diff)
SELECT j.tenant_id, j.name, 1, j.id, 'created', 'pulse init', 'sql', job_definition(j), '{}'
FROM jobs j WHERE j.parent_id IS NULL;

-- The run row of an attempt that ended, with the revision its slot was claimed under.
CREATE FUNCTION record_run(
    run_job_id uuid,
    run_tenant_id text,
    run_job_name text,
    run_scheduled_for timestamptz,
    run_attempt integer,
    run_node_id text,
    run_zone text,
    run_status text,
    run_lease_token bigint,
    run_started_at timestamptz,
    run_finished_at timestamptz,
    run_duration_s double precision,
    run_last_error text,
    run_output jsonb,
    run_origin text,
    run_revision integer
) RETURNS void
LANGUAGE sql SET search_path FROM CURRENT AS $$
    INSERT INTO runs AS r (job_id, tenant_id, job_name, scheduled_for, attempt, node_id, zone,
                           status, lease_token, started_at, finished_at, duration_s,
                           last_error, output, origin, revision)
    VALUES (run_job_id, run_tenant_id, run_job_name, run_scheduled_for, run_attempt,
            run_node_id, run_zone, run_status, run_lease_token, run_started_at,
            run_finished_at, run_duration_s, run_last_error, run_output, run_origin,
            run_revision)
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
$$;
