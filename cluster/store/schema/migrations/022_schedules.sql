-- Pulse schema, version 22: several schedules per job and max_runs (docs/design/schedules.md).
--
-- Several schedules live in the `schedule` text itself (`@schedules [...]`), so they need no
-- column. max_runs: the job is done after this many runs; runs_done counts the slots whose
-- last attempt ended (not skipped ones), written by the fenced completion with the run row.
-- Additive: a node of the previous release ignores both columns.

ALTER TABLE jobs ADD COLUMN max_runs integer CHECK (max_runs >= 1);
ALTER TABLE jobs ADD COLUMN runs_done integer NOT NULL DEFAULT 0;
