-- Pulse schema, version 9. Runs with search_path set to the cluster's schema.
--
-- Flights: the slots of overlap `allow` jobs, each in flight under a lease of its own, so
-- several slots of one job can run at once (docs/design/overlap.md). The job row keeps
-- the schedule: its claim hands the slot to a flight and moves on to the next slot at
-- once. A flight is `running` under its node's lease, or `queued` while it waits for a
-- retry or for the node that takes it over; it is deleted when its last attempt ends, the
-- attempt's run row written as for any run. Its token fences per slot. Additive: nodes of
-- the previous release refuse no job but never claim `allow` jobs' flights (they run
-- `allow` jobs as `forbid`, one slot at a time, until they are upgraded).

CREATE TABLE flights (
    job_id           uuid NOT NULL REFERENCES jobs (id) ON DELETE CASCADE,
    slot             timestamptz NOT NULL,
    shard_id         integer NOT NULL CHECK (shard_id >= 0),
    status           text NOT NULL CHECK (status IN ('queued', 'running')),
    attempt          integer NOT NULL DEFAULT 1 CHECK (attempt >= 1),
    due_at           timestamptz NOT NULL,
    lease_token      bigint NOT NULL,
    locked_by        text,
    locked_zone      text,
    locked_at        timestamptz,
    lease_expires_at timestamptz,
    cancel_by        text,
    PRIMARY KEY (job_id, slot)
);

-- Claims of queued flights and recovery of running ones, per held shard.
CREATE INDEX flights_by_shard ON flights (shard_id, status, due_at);
