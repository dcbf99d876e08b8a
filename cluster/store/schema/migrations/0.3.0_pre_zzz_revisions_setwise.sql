-- Pulse schema, 0.3.0: a revision's definition is computed once per job and side.
--
-- The `created` and `removed` revisions of a statement are written from its transition
-- table, one insert for all of its rows; each row's definition was computed twice there,
-- once for the revision and once more for its diff. Now once. A handler with no URL and
-- none of the words a secret goes by is shown as it is without the five masking scans:
-- what every definition computes, the `updated` row trigger's twice. Bulk applies pay for
-- these per job. Additive: the same signatures, and the same revisions.

CREATE OR REPLACE FUNCTION job_handler_shown(handler text) RETURNS text
LANGUAGE plpgsql IMMUTABLE AS $$
DECLARE
    word constant text := '(?:password|passwd|secret|token|api[-_]?key|access[-_]?key'
        '|private[-_]?key|auth|cookie|credential|session|signature|dsn)';
    scheme constant text := '(?:(?:bearer|basic|token|digest)\s+)';
BEGIN
    -- Each rule below needs a URL's `://` or one of the words: a handler with neither is
    -- shown as it is, without five scans of it.
    IF strpos(handler, '://') = 0 AND handler !~* word THEN
        RETURN handler;
    END IF;
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

CREATE OR REPLACE FUNCTION job_revision_created() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path FROM CURRENT AS $$
BEGIN
    -- OFFSET 0 keeps the definition a value computed once per row, not an expression
    -- the diff would compute again.
    INSERT INTO job_revisions (tenant_id, job_name, revision, job_id, change, who, how,
                               definition, diff)
    SELECT n.tenant_id, n.name, n.revision, n.id, 'created', job_revision_who(),
           job_revision_how(), d.definition, job_definition_diff(NULL, d.definition)
    FROM created_jobs n CROSS JOIN LATERAL (SELECT job_definition(n) AS definition OFFSET 0) d
    WHERE n.parent_id IS NULL;
    RETURN NULL;
END
$$;

CREATE OR REPLACE FUNCTION job_revision_removed() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path FROM CURRENT AS $$
BEGIN
    INSERT INTO job_revisions (tenant_id, job_name, revision, job_id, change, who, how,
                               definition, diff)
    SELECT o.tenant_id, o.name, o.revision + 1, o.id, 'removed', job_revision_who(),
           job_revision_how(), d.definition, job_definition_diff(d.definition, NULL)
    FROM removed_jobs o CROSS JOIN LATERAL (SELECT job_definition(o) AS definition OFFSET 0) d
    WHERE o.parent_id IS NULL;
    RETURN NULL;
END
$$;

DO $$
BEGIN
    EXECUTE format('ALTER FUNCTION job_revision_created() SET search_path = %I, pg_temp',
                   current_schema());
    EXECUTE format('ALTER FUNCTION job_revision_removed() SET search_path = %I, pg_temp',
                   current_schema());
END $$;
