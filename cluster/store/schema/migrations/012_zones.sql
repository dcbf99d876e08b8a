-- Pulse schema, version 12: zone-pinned jobs (docs/design/zones.md). Additive: nodes of
-- earlier versions never lock the zone shards, so they never claim a pinned job.

-- The zone set a job is pinned to (sorted, de-duplicated); NULL: any zone.
ALTER TABLE jobs ADD COLUMN zones text[];

-- One shard space per zone set, numbered once and for good. Its shards are
-- 65536 + (space - 1) * 16 .. + 15 (ring/zones.py: ZONE_SHARD_BASE, ZONE_SHARDS).
CREATE TABLE zone_spaces (
    space       int GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    zones       text[] NOT NULL UNIQUE CHECK (cardinality(zones) > 0),
    first_shard int GENERATED ALWAYS AS (65536 + (space - 1) * 16) STORED,
    created_at  timestamptz NOT NULL DEFAULT now()
);

-- An each-zone job is a parent that never runs itself (parked: shard 2147483647, which no
-- node locks, and no due time); nodes keep one child per live zone, pinned to that zone
-- and pointing at its parent (parent_id), whose runs carry the zone.
ALTER TABLE jobs ADD COLUMN each_zone boolean NOT NULL DEFAULT false;
ALTER TABLE jobs ADD COLUMN parent_id uuid;
CREATE INDEX jobs_children ON jobs (parent_id) WHERE parent_id IS NOT NULL;
-- Every node reads the each-zone parents every few seconds: a probe, not a scan.
CREATE INDEX jobs_each_zone ON jobs (id) WHERE each_zone;
