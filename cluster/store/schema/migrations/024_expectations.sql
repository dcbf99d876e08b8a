-- Pulse schema, version 24: run-time expectations and per-job health (docs/design/expectations.md).
--
-- A job may expect a run to take at most expect_max_s, at least expect_min_s, to end by a
-- wall-clock deadline in its zone, or to stay within expect_baseline times the p95 of its
-- kept successful runs; and its runs' metrics to pass `asserts`. The late pass raises
-- `slow` and `overdue` while a run goes on, the completion `too_fast` and
-- `assertion_failed`. expect_slot and expect_marks (on the flight, for a flight) say which
-- of them were raised for the run of that slot, so each is raised once per run however
-- many nodes run the pass. expect_state is the job's health as the console shows it.
-- Additive: nodes of the previous release ignore the columns (they raise none of the events).

ALTER TABLE jobs ADD COLUMN expect_max_s double precision CHECK (expect_max_s > 0);
ALTER TABLE jobs ADD COLUMN expect_min_s double precision CHECK (expect_min_s > 0);
ALTER TABLE jobs ADD COLUMN deadline text CHECK (deadline ~ '^([01][0-9]|2[0-3]):[0-5][0-9]$');
ALTER TABLE jobs ADD COLUMN expect_baseline double precision CHECK (expect_baseline >= 1);
ALTER TABLE jobs ADD COLUMN asserts text CHECK (asserts <> '');
ALTER TABLE jobs ADD COLUMN assert_fails boolean NOT NULL DEFAULT false;
ALTER TABLE jobs ADD COLUMN expect_slot timestamptz;
ALTER TABLE jobs ADD COLUMN expect_marks text[];
ALTER TABLE jobs ADD COLUMN expect_state text
    CHECK (expect_state IN ('ok', 'slow', 'overdue', 'too_fast', 'assertion_failed'));
ALTER TABLE jobs ADD COLUMN expect_state_at timestamptz;
ALTER TABLE flights ADD COLUMN expect_marks text[];

-- The late pass reads the jobs a run of which can be slow or overdue: a probe of this
-- index, however many jobs have no such expectation.
CREATE INDEX jobs_expecting ON jobs (id)
    WHERE expect_max_s IS NOT NULL OR deadline IS NOT NULL OR expect_baseline IS NOT NULL;

-- The new events; replaced NOT VALID as 008 does for runs: every stored row passes it.
ALTER TABLE alert_events DROP CONSTRAINT alert_events_event_check;
ALTER TABLE alert_events ADD CONSTRAINT alert_events_event_check
    CHECK (event IN ('failed', 'recovered', 'lost', 'late', 'skipped', 'paused', 'slow',
                     'overdue', 'too_fast', 'assertion_failed')) NOT VALID;
