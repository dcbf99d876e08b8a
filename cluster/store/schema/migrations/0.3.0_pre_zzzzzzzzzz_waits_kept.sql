-- Pulse schema, 0.3.0: every wait of a slot for a named limit is kept.
--
-- A slot's wait was one row per job and slot, and a retry passed over for its key after
-- the slot had waited once opened that row again from the new pass (limit_wait_again):
-- the first wait's start and end were overwritten, so `pulse audit` reported only the
-- last wait of a slot that waited twice. Each wait is a row of its own now, keyed by its
-- start; at most one wait of a slot is open (limit_waits_one_open), so the claims' and the
-- take triggers' inserts, ON CONFLICT DO NOTHING, record a slot waiting once while it
-- waits, and a slot that waits again after its wait ended gets a new row.
--
-- Additive for nodes of the previous release: their inserts are the same statements.

DROP TRIGGER limit_wait_again ON limit_waits;
DROP FUNCTION limit_wait_again();

ALTER TABLE limit_waits DROP CONSTRAINT limit_waits_pkey;
ALTER TABLE limit_waits ADD PRIMARY KEY (job_id, slot, since);
CREATE UNIQUE INDEX limit_waits_one_open ON limit_waits (job_id, slot) WHERE ended IS NULL;
