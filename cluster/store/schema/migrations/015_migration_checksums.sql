-- Pulse schema, version 15. Runs with search_path set to the cluster's schema.
--
-- A landed migration is never edited (docs/design/schema.md). `pulse init` records the
-- sha256 of each file it applies and refuses a schema whose applied file has changed;
-- rows applied before this version get the checksum of their file as it is when this
-- version is applied (cluster/store/migrate.py). Nodes read only schema_version.version.
ALTER TABLE schema_version ADD COLUMN checksum text CHECK (checksum ~ '^[0-9a-f]{64}$');

-- The post-migration of 007: record_run without the output (005). No statement calls it
-- and no released node ever did (release 0.1.0 shipped schema 4, before record_run). The
-- version without the origin (007) stays: release and recover call it.
DROP FUNCTION record_run(uuid, text, text, timestamptz, integer, text, text, text, bigint,
                         timestamptz, timestamptz, double precision, text);
