-- Pulse schema, version 16. Runs with search_path set to the cluster's schema.
--
-- The post-migration of 011: record_run without the origin (007). Release and recover of
-- jobs now pass the slot's origin like every other statement, so nothing calls it, and
-- no released node ever did (release 0.1.0 shipped schema 4, before record_run).
DROP FUNCTION record_run(uuid, text, text, timestamptz, integer, text, text, text, bigint,
                         timestamptz, timestamptz, double precision, text, jsonb);
