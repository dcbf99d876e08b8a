-- Pulse schema, 0.3.0: a completion sees the changes made while its slot ran.
--
-- A completion plans the job's next slot in the node, with the timing, calendar and
-- windows its claim read, and records skipped the slots they skip on the way. A change of
-- either while the slot ran was not seen:
-- - a blackout window called off (or a holiday taken out) left the slots after it that the
--   old rule skipped recorded skipped, naming a window that no longer was;
-- - a new timing by apply sent the job on to the old timing's next slot, so the new
--   timing's slots after the change until then had no record.
-- jobs.rule_changed_at is when a calendar or window change last rewrote the job's copy of
-- its rule: a completion of an attempt claimed at or before it writes none of its old
-- rule's skips after it, and the job goes back to the first of them, which its claim
-- decides under the rule in force. jobs.timing_slot and timing_start are where an apply
-- that changed the timing of a running job plans it to go on (the new timing's first slot
-- after the change, and its start): the completion of the slot that ran goes there, when
-- the slot does not wait for a retry, and writes none of its walk's skips. The apply
-- records the old timing's slots between the running slot and the change, as for a slot
-- held at its gate.
--
-- Additive: nodes of the previous release complete as before.

ALTER TABLE jobs ADD COLUMN rule_changed_at timestamptz;
ALTER TABLE jobs ADD COLUMN timing_slot timestamptz;
ALTER TABLE jobs ADD COLUMN timing_start timestamptz;
