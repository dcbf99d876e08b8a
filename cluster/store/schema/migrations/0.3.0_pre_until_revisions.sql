-- Pulse schema, 0.3.0: `pause --until` is recorded by a revision, so the audit sees it.
--
-- A pause --until moves an idle job past its slots before the time without touching
-- `paused`: no revision was written, and the audit called the slots passed over missing.
-- The definition a revision records gains `paused_until` (set by pause --until, cleared by
-- resume), and the pause trigger watches it beside `paused`. Additive: the same
-- signatures; nodes of the previous release write these columns as they did.

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

DROP TRIGGER jobs_revision_paused ON jobs;
CREATE TRIGGER jobs_revision_paused BEFORE UPDATE OF paused, paused_until ON jobs
FOR EACH ROW WHEN (NEW.parent_id IS NULL AND (OLD.paused, OLD.paused_until)
                   IS DISTINCT FROM (NEW.paused, NEW.paused_until))
EXECUTE FUNCTION job_revision_updated();
