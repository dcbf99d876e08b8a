-- Pulse schema, 0.3.0: a job's timing holds from the instant it was written.
--
-- A job whose timing changes while its slot is kept (held at its gate, deferred by a
-- window, waiting for a retry, running) has that slot decided as before, and then walked
-- on to its next slot under the new timing. The walk took the new timing's slots between
-- the kept slot and the change as the job's own: slots that were never slots of its timing
-- at their time were recorded skipped by catch-up, or run by a `backfill` catch-up.
-- jobs.timing_from is when the job's current timing was written: a walk onward from a
-- slot before it goes to the new timing's first slot at or after it, and the old timing's
-- slots in between are recorded skipped by the apply. NULL: the timing the job was
-- created with, which holds for all its slots.
--
-- Additive: nodes of the previous release read jobs by their columns and walk as before.

ALTER TABLE jobs ADD COLUMN timing_from timestamptz;
