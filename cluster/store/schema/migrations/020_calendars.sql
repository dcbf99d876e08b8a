-- Pulse schema, version 20: business calendars (cluster/store/calendars.py,
-- docs/design/calendars.md). Additive: a node of an earlier release ignores the new
-- columns and plans calendar jobs as plain schedules until it is upgraded.
--
-- A calendar is business weekdays (0 = Monday) minus excluded dates, shared by every
-- tenant. A job that uses one keeps, in calendar_rule, the calendar as it stood with its
-- on_excluded and business_day (JSON text): the claim hands it to the node in the same
-- row, so a calendar job costs no extra statement. Changing a calendar rewrites that
-- copy and re-plans each job's next slot in the same transaction.
CREATE TABLE calendars (
    name       text PRIMARY KEY CHECK (name <> ''),
    weekdays   smallint[] NOT NULL,
    excluded   date[] NOT NULL DEFAULT '{}',
    source     text NOT NULL DEFAULT '',
    version    bigint NOT NULL DEFAULT 1,
    created_at timestamptz NOT NULL DEFAULT now(),
    updated_at timestamptz NOT NULL DEFAULT now()
);

ALTER TABLE jobs
    ADD COLUMN calendar      text REFERENCES calendars (name),
    ADD COLUMN on_excluded   text CHECK (on_excluded IN
                                 ('skip', 'next-business-day', 'previous-business-day')),
    ADD COLUMN business_day  integer CHECK (business_day <> 0),
    ADD COLUMN calendar_rule text,
    -- `pulse jobs pause NAME --until T`: the job is idle with its next slot at or after T
    -- (nothing needs to wake it); kept to show the pause and for `resume` to undo it.
    ADD COLUMN paused_until  timestamptz;

CREATE INDEX jobs_calendar ON jobs (calendar) WHERE calendar IS NOT NULL;

-- Blackout windows: slots starting in [starts_at, ends_at) of the jobs in scope (one job,
-- a tenant's, or the cluster's) are skipped, or with `defer` run at ends_at under the
-- job's catch-up policy. Jobs keep the windows that concern them in calendar_rule too.
CREATE TABLE windows (
    id           bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    starts_at    timestamptz NOT NULL,
    ends_at      timestamptz NOT NULL,
    window_scope text NOT NULL CHECK (window_scope IN ('job', 'tenant', 'cluster')),
    tenant_id    text,
    job_name     text,
    defer        boolean NOT NULL DEFAULT false,
    note         text,
    created_at   timestamptz NOT NULL DEFAULT now(),
    CHECK (ends_at > starts_at),
    CHECK ((window_scope = 'cluster') = (tenant_id IS NULL)),
    CHECK ((window_scope = 'job') = (job_name IS NOT NULL))
);

CREATE INDEX windows_ends ON windows (ends_at);
