-- Pulse schema, 0.3.0: no function of the schema finds a caller's temporary table.
--
-- A function's own search_path that names only the schema searches pg_temp first. Those
-- that run as the owner (SECURITY DEFINER: the revision triggers, the quota checks, the
-- watch pings) would then write a temporary table a node or web login made in its place,
-- and fire that table's triggers as the owner. Every function of the schema that fixes its
-- search_path, or runs as the owner, gets the schema then pg_temp: a name the schema holds
-- always resolves there. Additive: same signatures and bodies, for old and new nodes alike.
DO $$
DECLARE
    f regprocedure;
BEGIN
    FOR f IN
        SELECT p.oid::regprocedure FROM pg_proc p
        WHERE p.pronamespace = current_schema()::regnamespace
          AND (p.prosecdef OR EXISTS (SELECT 1 FROM unnest(p.proconfig) AS c
                                      WHERE c LIKE 'search_path=%'))
    LOOP
        EXECUTE format('ALTER FUNCTION %s SET search_path = %I, pg_temp', f, current_schema());
    END LOOP;
END $$;
