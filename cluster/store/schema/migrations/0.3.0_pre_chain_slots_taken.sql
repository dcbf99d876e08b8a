-- Pulse schema, 0.3.0: chained jobs' taken slots are pruned.
--
-- chain_slots kept every slot released to a chained job for ever. The pruning pass now
-- deletes a taken row once it is older than keep_failed_for and its run is gone; this
-- index finds those rows without reading the slots still queued. Additive: nodes of the
-- previous release never prune chain_slots.
CREATE INDEX chain_slots_taken ON chain_slots (created_at) WHERE taken;
