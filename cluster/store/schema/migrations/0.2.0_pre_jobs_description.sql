-- Pulse schema, 0.2.0: a job's description, recorded by its revisions.
--
-- Additive: a column nodes of the previous release neither read nor write (their upsert
-- and claim name their columns), so they keep running. The definition a revision records
-- gains the description (the upstreams stay in it), and names each option as job files and the JSON do: `retries`,
-- whose column is max_retries (revisions written before keep `max_retries`; rollback reads
-- both). The update trigger watches the new column too. The column has no check: a check
-- added with it would scan the jobs table under its lock; the writers check it instead.

ALTER TABLE jobs ADD COLUMN description text;

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
        'retries', j.max_retries, 'retry_backoff_s', j.retry_backoff_s,
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
        'payload_schema', j.payload_schema, 'description', j.description)
    || (SELECT jsonb_build_object(
                   'after', coalesce(jsonb_agg(u.name ORDER BY u.name), '[]'::jsonb),
                   'after_match', min(e.match))
        FROM job_edges e JOIN jobs u ON u.id = e.upstream_id
        WHERE e.downstream_id = j.id)
$$;

DROP TRIGGER jobs_revision_updated ON jobs;
CREATE TRIGGER jobs_revision_updated BEFORE UPDATE OF
    schedule, tz, dst_repeated, dst_skipped, handler, payload, catch_up, grace_s,
    max_backfill, timeout_s, max_retries, retry_backoff_s, keep_for_s, keep_runs,
    output_limit, late_after_s, pause_after_failures, overlap, max_concurrent,
    cancel_grace_s, jitter_s, remove_when_done, calendar, on_excluded, business_day, zones,
    each_zone, after_timeout_s, after_failure, max_runs, labels, expect_max_s, expect_min_s,
    deadline, expect_baseline, asserts, assert_fails, watch, adopt_at, payload_schema,
    description ON jobs
FOR EACH ROW WHEN (NEW.parent_id IS NULL AND (
    OLD.schedule, OLD.tz, OLD.dst_repeated, OLD.dst_skipped, OLD.handler, OLD.payload,
    OLD.catch_up, OLD.grace_s, OLD.max_backfill, OLD.timeout_s, OLD.max_retries,
    OLD.retry_backoff_s, OLD.keep_for_s, OLD.keep_runs, OLD.output_limit, OLD.late_after_s,
    OLD.pause_after_failures, OLD.overlap, OLD.max_concurrent, OLD.cancel_grace_s,
    OLD.jitter_s, OLD.remove_when_done, OLD.calendar, OLD.on_excluded, OLD.business_day,
    OLD.zones, OLD.each_zone, OLD.after_timeout_s, OLD.after_failure, OLD.max_runs,
    OLD.labels, OLD.expect_max_s, OLD.expect_min_s, OLD.deadline, OLD.expect_baseline,
    OLD.asserts, OLD.assert_fails, OLD.watch, OLD.adopt_at, OLD.payload_schema,
    OLD.description)
    IS DISTINCT FROM (
    NEW.schedule, NEW.tz, NEW.dst_repeated, NEW.dst_skipped, NEW.handler, NEW.payload,
    NEW.catch_up, NEW.grace_s, NEW.max_backfill, NEW.timeout_s, NEW.max_retries,
    NEW.retry_backoff_s, NEW.keep_for_s, NEW.keep_runs, NEW.output_limit, NEW.late_after_s,
    NEW.pause_after_failures, NEW.overlap, NEW.max_concurrent, NEW.cancel_grace_s,
    NEW.jitter_s, NEW.remove_when_done, NEW.calendar, NEW.on_excluded, NEW.business_day,
    NEW.zones, NEW.each_zone, NEW.after_timeout_s, NEW.after_failure, NEW.max_runs,
    NEW.labels, NEW.expect_max_s, NEW.expect_min_s, NEW.deadline, NEW.expect_baseline,
    NEW.asserts, NEW.assert_fails, NEW.watch, NEW.adopt_at, NEW.payload_schema,
    NEW.description))
EXECUTE FUNCTION job_revision_updated();
