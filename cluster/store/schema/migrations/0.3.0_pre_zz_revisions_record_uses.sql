-- Pulse schema, 0.3.0: revisions record `uses`, the named limits a job takes.
--
-- The revision function and the trigger that watches its columns, re-created with every
-- option this release added: `priority`, `each_node` and `uses`. Migrations of a release
-- apply by name, and each of 0.3.0_pre_until_revisions, 0.3.0_pre_within_tenant_priority and
-- 0.3.0_pre_zones_each_node re-creates them, so this one is named to apply after them all.
-- An option added later in this release re-creates them in a file that sorts after this
-- one. Additive: the same signatures.

CREATE OR REPLACE FUNCTION job_definition(j jobs) RETURNS jsonb
LANGUAGE sql STABLE SET search_path FROM CURRENT AS $$
    SELECT jsonb_build_object(
        'schedule', j.schedule, 'tz', j.tz, 'dst_repeated', j.dst_repeated,
        'dst_skipped', j.dst_skipped,
        'handler', job_handler_shown(j.handler),
        'payload', j.payload, 'paused', j.paused, 'paused_until', j.paused_until,
        'catch_up', j.catch_up,
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
    -- A call takes at most 100 arguments: the options added since 0.3.0 go in this one.
    || jsonb_build_object('priority', j.priority, 'each_node', j.each_node, 'uses', j.uses)
    || (SELECT jsonb_build_object(
                   'after', coalesce(jsonb_agg(u.name ORDER BY u.name), '[]'::jsonb),
                   'after_match', min(e.match))
        FROM job_edges e JOIN jobs u ON u.id = e.upstream_id
        WHERE e.downstream_id = j.id)
$$;

DO $$
BEGIN
    EXECUTE format('ALTER FUNCTION job_definition(jobs) SET search_path = %I, pg_temp',
                   current_schema());
END $$;

DROP TRIGGER jobs_revision_updated ON jobs;
CREATE TRIGGER jobs_revision_updated BEFORE UPDATE OF
    schedule, tz, dst_repeated, dst_skipped, handler, payload, catch_up, grace_s,
    max_backfill, timeout_s, max_retries, retry_backoff_s, keep_for_s, keep_runs,
    output_limit, late_after_s, pause_after_failures, overlap, max_concurrent,
    cancel_grace_s, jitter_s, remove_when_done, calendar, on_excluded, business_day, zones,
    each_zone, after_timeout_s, after_failure, max_runs, labels, expect_max_s, expect_min_s,
    deadline, expect_baseline, asserts, assert_fails, watch, adopt_at, payload_schema,
    description, priority, each_node, uses ON jobs
FOR EACH ROW WHEN (NEW.parent_id IS NULL AND (
    OLD.schedule, OLD.tz, OLD.dst_repeated, OLD.dst_skipped, OLD.handler, OLD.payload,
    OLD.catch_up, OLD.grace_s, OLD.max_backfill, OLD.timeout_s, OLD.max_retries,
    OLD.retry_backoff_s, OLD.keep_for_s, OLD.keep_runs, OLD.output_limit, OLD.late_after_s,
    OLD.pause_after_failures, OLD.overlap, OLD.max_concurrent, OLD.cancel_grace_s,
    OLD.jitter_s, OLD.remove_when_done, OLD.calendar, OLD.on_excluded, OLD.business_day,
    OLD.zones, OLD.each_zone, OLD.after_timeout_s, OLD.after_failure, OLD.max_runs,
    OLD.labels, OLD.expect_max_s, OLD.expect_min_s, OLD.deadline, OLD.expect_baseline,
    OLD.asserts, OLD.assert_fails, OLD.watch, OLD.adopt_at, OLD.payload_schema,
    OLD.description, OLD.priority, OLD.each_node, OLD.uses)
    IS DISTINCT FROM (
    NEW.schedule, NEW.tz, NEW.dst_repeated, NEW.dst_skipped, NEW.handler, NEW.payload,
    NEW.catch_up, NEW.grace_s, NEW.max_backfill, NEW.timeout_s, NEW.max_retries,
    NEW.retry_backoff_s, NEW.keep_for_s, NEW.keep_runs, NEW.output_limit, NEW.late_after_s,
    NEW.pause_after_failures, NEW.overlap, NEW.max_concurrent, NEW.cancel_grace_s,
    NEW.jitter_s, NEW.remove_when_done, NEW.calendar, NEW.on_excluded, NEW.business_day,
    NEW.zones, NEW.each_zone, NEW.after_timeout_s, NEW.after_failure, NEW.max_runs,
    NEW.labels, NEW.expect_max_s, NEW.expect_min_s, NEW.deadline, NEW.expect_baseline,
    NEW.asserts, NEW.assert_fails, NEW.watch, NEW.adopt_at, NEW.payload_schema,
    NEW.description, NEW.priority, NEW.each_node, NEW.uses))
EXECUTE FUNCTION job_revision_updated();
