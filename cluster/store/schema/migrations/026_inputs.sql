-- Pulse schema, version 26: runs with inputs (docs/design/inputs.md).
--
-- payload_schema: a JSON Schema every payload of the job must match, checked by the
-- writers (add, apply, trigger), never by a node. A flight's payload is the input of one
-- slot asked for by `pulse jobs trigger --payload` or `--slot` (NULL: the job's payload),
-- and a backfill request's is copied to the flights it queues. A backfill request's origin
-- is `rerun` for `pulse jobs trigger --slot`, a one-slot request.
-- Additive: nodes of the previous release never read the new columns; a flight with a
-- payload they claim runs with the job's payload, and a rerun runs as a backfill slot.

ALTER TABLE jobs ADD COLUMN payload_schema jsonb;
ALTER TABLE backfills ADD COLUMN origin text NOT NULL DEFAULT 'backfill'
    CHECK (origin IN ('backfill', 'rerun'));
ALTER TABLE backfills ADD COLUMN payload jsonb;
ALTER TABLE flights ADD COLUMN payload jsonb;
