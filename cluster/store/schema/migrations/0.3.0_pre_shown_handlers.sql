-- Pulse schema, 0.3.0: literal credentials are masked wherever a job's handler is shown.
--
-- Revisions masked only a password in a URL; an `Authorization` header of an http: job or a
-- shell command's `PGPASSWORD=...` showed through, and the API's search matched inside them.
-- job_handler_shown masks them all; revisions record it (job_definition) and the search
-- reads it. Additive: the same signatures; nodes never call either.

-- A handler as it is shown (Python's masking.shown holds the same rules, and a test checks
-- both agree): a password in a URL, a secret header or key of a JSON handler, a shell
-- command's `Authorization: ...`, `--password ...` and `PGPASSWORD=...` are `***`, unless
-- the value is a reference (`${env:NAME}`, `$NAME`). Revisions record it; the search reads it.
CREATE FUNCTION job_handler_shown(handler text) RETURNS text
LANGUAGE plpgsql IMMUTABLE AS $$
DECLARE
    word constant text := '(?:password|passwd|secret|token|api[-_]?key|access[-_]?key'
        '|private[-_]?key|auth|cookie|credential|session|signature|dsn)';
    scheme constant text := '(?:(?:bearer|basic|token|digest)\s+)';
BEGIN
    handler := regexp_replace(handler,
        $re$(://[^/@:"\s]*):(?!\$\{env:[A-Za-z_][A-Za-z0-9_]*\}@)[^@/"\s]+@$re$, '\1:***@', 'g');
    handler := regexp_replace(handler,
        $re$("[A-Za-z0-9_-]*$re$ || word || $re$[A-Za-z0-9_-]*"\s*:\s*")$re$
        || $re$(?![^"]*\$\{env:)(?:[^"\\]|\\.)*"$re$, '\1***"', 'gi');
    handler := regexp_replace(handler,
        $re$(^|[^A-Za-z0-9_-])([A-Za-z0-9_-]*$re$ || word || $re$[A-Za-z0-9_-]*\s*:\s*$re$
        || scheme || $re$?)(?!\$|$re$ || scheme || $re$)[^\s"',;}@]+$re$, '\1\2***', 'gi');
    handler := regexp_replace(handler,
        $re$(^|\s)(--?[A-Za-z0-9_-]*$re$ || word || $re$)(=|\s+)$re$
        || $re$(?!["']?\$)("[^"]*"|'[^']*'|[^\s"']+)$re$, '\1\2\3***', 'gi');
    RETURN regexp_replace(handler,
        $re$(^|[^A-Za-z0-9_])([A-Za-z0-9_]*$re$ || word || $re$[A-Za-z0-9_]*\s*=\s*)$re$
        || $re$(?!["']?\$)("[^"]*"|'[^']*'|[^\s"'&;]+)$re$, '\1\2***', 'gi');
END $$;

CREATE OR REPLACE FUNCTION job_definition(j jobs) RETURNS jsonb
LANGUAGE sql STABLE SET search_path FROM CURRENT AS $$
    SELECT jsonb_build_object(
        'schedule', j.schedule, 'tz', j.tz, 'dst_repeated', j.dst_repeated,
        'dst_skipped', j.dst_skipped,
        'handler', job_handler_shown(j.handler),
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

DO $$
BEGIN
    EXECUTE format('ALTER FUNCTION job_definition(jobs) SET search_path = %I, pg_temp',
                   current_schema());
END $$;
