-- The Pulse schema as it stands after the newest migration, for readers.
--
-- `pulse init` never runs this file: it applies the migrations in order. This file is
-- edited in the same commit as each new migration, and tests/integration/test_schema.py
-- applies both to empty databases and fails on any difference in their catalogs
-- (docs/design/schema.md). Columns are listed in the order the migrations left them in.
-- Runs with search_path set to the cluster's schema.


-- == Bookkeeping =========================================================================

-- One row per applied migration, written by cluster/store/schema/migrate.py (which creates the
-- table before the first migration). A numbered migration (001 to 029) is its number and
-- the name after it; a later one is its file's name, its version the next number, which
-- only keeps the order applied. checksum: the sha256 of the file as applied; init and a
-- starting node refuse a schema whose file has changed since.
CREATE TABLE schema_version (
    version    integer PRIMARY KEY,
    name       text NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT now(),
    checksum   text CHECK (checksum ~ '^[0-9a-f]{64}$')
);

-- Facts fixed at the first init: the shard count ('shard_count') never changes.
CREATE TABLE meta (
    key   text PRIMARY KEY,
    value text NOT NULL
);

-- Cluster-wide settings an operator changes at run time (`pulse config set`); values are
-- text, parsed by cluster/retention.py. `pulse init` seeds the defaults.
CREATE TABLE config (
    key        text PRIMARY KEY,
    value      text NOT NULL,
    updated_at timestamptz NOT NULL DEFAULT now()
);


-- Business calendars, shared by every tenant: business weekdays (0 = Monday) minus excluded
-- dates (cluster/store/jobstore/calendars.py, docs/design/calendars.md).
CREATE TABLE calendars (
    name       text PRIMARY KEY CHECK (name <> ''),
    weekdays   smallint[] NOT NULL,
    excluded   date[] NOT NULL DEFAULT '{}',
    source     text NOT NULL DEFAULT '',
    version    bigint NOT NULL DEFAULT 1,
    created_at timestamptz NOT NULL DEFAULT now(),
    updated_at timestamptz NOT NULL DEFAULT now()
);

-- Blackout windows: slots starting inside are skipped, or deferred to the end (`defer`),
-- for one job, a tenant's jobs or the cluster's (cluster/store/jobstore/windows.py).
CREATE TABLE windows (
    id           bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    starts_at    timestamptz NOT NULL,
    ends_at      timestamptz NOT NULL,
    -- label (migration 023): the jobs whose label label_key is label_value, of tenant_id
    -- or, when it is NULL, of every tenant.
    window_scope text NOT NULL CONSTRAINT windows_window_scope_check
                 CHECK (window_scope IN ('job', 'tenant', 'cluster', 'label')),
    tenant_id    text,
    job_name     text,
    defer        boolean NOT NULL DEFAULT false,
    note         text,
    created_at   timestamptz NOT NULL DEFAULT now(),
    label_key    text,
    label_value  text,
    CHECK (ends_at > starts_at),
    CONSTRAINT windows_tenant_check
        CHECK (CASE window_scope WHEN 'cluster' THEN tenant_id IS NULL
                                 WHEN 'label' THEN true
                                 ELSE tenant_id IS NOT NULL END),
    CONSTRAINT windows_job_check CHECK ((window_scope = 'job') = (job_name IS NOT NULL)),
    CONSTRAINT windows_label_check
        CHECK ((window_scope = 'label') = (label_key IS NOT NULL AND label_value IS NOT NULL))
);

CREATE INDEX windows_ends ON windows (ends_at);


-- == Jobs ================================================================================

-- A job is its definition and, while an attempt is in flight, that attempt's only record
-- (locked_by, locked_zone, locked_at, slot_at, attempt, lease_token): the run row is
-- written when the attempt ends. fillfactor 80 leaves room on each page for the claim's
-- HOT updates (docs/design/claim-plan.md).
CREATE TABLE jobs (
    id               uuid PRIMARY KEY,
    tenant_id        text NOT NULL DEFAULT 'default' CHECK (tenant_id <> ''),
    name             text NOT NULL CHECK (name <> ''),
    schedule         text NOT NULL,
    tz               text NOT NULL DEFAULT 'UTC',
    dst_repeated     text NOT NULL DEFAULT 'once' CHECK (dst_repeated IN ('once', 'twice')),
    dst_skipped      text NOT NULL DEFAULT 'shift' CHECK (dst_skipped IN ('shift', 'skip')),
    handler          text NOT NULL,
    payload          jsonb NOT NULL DEFAULT '{}'::jsonb CHECK (jsonb_typeof(payload) = 'object'),
    -- idle: waiting for next_run_at; running: claimed under a lease; paused: not claimed
    -- (its next_run_at is 9999-01-01, out of the due range); done: a one-off whose slot ran.
    -- The check was added NOT VALID by a migration, to spare a scan under lock.
    status           text NOT NULL DEFAULT 'idle'
                     CONSTRAINT jobs_status_check
                     CHECK (status IN ('idle', 'running', 'paused', 'done')),
    paused           boolean NOT NULL DEFAULT false,
    shard_id         integer NOT NULL CHECK (shard_id >= 0),
    -- next_run_at is when the job is due to be claimed; slot_at is the scheduled slot that
    -- claim runs (they differ only while a failed attempt waits out its retry backoff).
    next_run_at      timestamptz NOT NULL,
    slot_at          timestamptz NOT NULL,
    attempt          integer NOT NULL DEFAULT 1 CHECK (attempt >= 1),
    last_run_at      timestamptz,
    locked_by        text,
    locked_at        timestamptz,
    lease_expires_at timestamptz,
    lease_token      bigint NOT NULL DEFAULT 0,
    catch_up         text NOT NULL DEFAULT 'once' CHECK (catch_up IN ('skip', 'once', 'backfill')),
    grace_s          double precision NOT NULL DEFAULT 60 CHECK (grace_s >= 0),
    max_backfill     integer NOT NULL DEFAULT 100 CHECK (max_backfill >= 1),
    timeout_s        double precision NOT NULL DEFAULT 300 CHECK (timeout_s > 0),
    max_retries      integer NOT NULL DEFAULT 0 CHECK (max_retries >= 0),
    retry_backoff_s  double precision NOT NULL DEFAULT 10 CHECK (retry_backoff_s >= 0),
    created_at       timestamptz NOT NULL DEFAULT now(),
    updated_at       timestamptz NOT NULL DEFAULT now(),
    -- The zone of the node running the attempt in flight, for its run row.
    locked_zone      text,
    -- Retention of this job's runs; NULL follows the cluster's config.
    keep_for_s       double precision CHECK (keep_for_s > 0),
    keep_runs        integer CHECK (keep_runs >= 1),
    -- Bytes of output kept per stream (stdout, stderr, result, log) of a run.
    output_limit     integer NOT NULL DEFAULT 16384 CHECK (output_limit BETWEEN 0 AND 262144),
    -- A slot not started this long after it was due raises a `late` alert, once per slot
    -- (late_slot).
    late_after_s     double precision NOT NULL DEFAULT 60 CHECK (late_after_s > 0),
    late_slot        timestamptz,
    -- Auto-pause after this many failed slots in a row (NULL: never); failed_slots counts
    -- them, a successful slot sets it back to 0; pause_note says why the job is paused.
    pause_after_failures integer CHECK (pause_after_failures >= 1),
    failed_slots     integer NOT NULL DEFAULT 0,
    pause_note       text,
    -- Overlap policy (docs/design/overlap.md); `allow` runs slots as flights, at most
    -- max_concurrent at once.
    overlap          text NOT NULL DEFAULT 'forbid' CHECK (overlap IN ('forbid', 'allow', 'replace')),
    max_concurrent   integer NOT NULL DEFAULT 10 CHECK (max_concurrent >= 1),
    cancel_grace_s   double precision NOT NULL DEFAULT 10 CHECK (cancel_grace_s >= 0),
    -- Who asked to cancel the running claim (NULL: nobody). Every statement that ends a
    -- claim clears it, so a request never outlives the run it was made for.
    cancel_by        text,
    -- Start jitter, and one-offs (docs/design/time.md). slot_origin: why the current slot
    -- is due, for its run row ('trigger', 'catch-up'; NULL: its schedule).
    jitter_s         double precision NOT NULL DEFAULT 0 CHECK (jitter_s >= 0),
    remove_when_done boolean NOT NULL DEFAULT false,
    slot_origin      text,
    -- The zone set a job is pinned to (sorted, de-duplicated; NULL: any zone). An each-zone
    -- job is a parent that never runs itself; its children (parent_id) run one per zone.
    zones            text[],
    each_zone        boolean NOT NULL DEFAULT false,
    parent_id        uuid,
    -- The job's tenant has a limit of concurrent runs: the place triggers below fire.
    limited          boolean NOT NULL DEFAULT false,
    -- A business calendar (docs/design/calendars.md): its name, what excluded slots do, the
    -- business-day index of a "n-th business day" schedule, and the calendar as it stands
    -- with those two (JSON text), handed to the node by the claim.
    calendar         text REFERENCES calendars (name),
    on_excluded      text CHECK (on_excluded IN
                         ('skip', 'next-business-day', 'previous-business-day')),
    business_day     integer CHECK (business_day <> 0),
    calendar_rule    text,
    -- `pulse jobs pause --until`: idle, its next slot at or after this time.
    paused_until     timestamptz,
    UNIQUE (tenant_id, name),
    -- Dependencies (docs/design/gates.md): `gated` jobs have upstreams, `feeds` jobs have
    -- downstreams; gate_wait: the current slot is held until its upstreams' slots succeed.
    gated            boolean NOT NULL DEFAULT false,
    feeds            boolean NOT NULL DEFAULT false,
    gate_wait        boolean NOT NULL DEFAULT false,
    after_timeout_s  double precision CHECK (after_timeout_s > 0),
    after_failure    text NOT NULL DEFAULT 'block'
                     CHECK (after_failure IN ('block', 'run', 'skip')),
    -- Incremental runs (ctx.previous_slot, ctx.last_success_slot, ctx.state): the slot
    -- handled before the current one, the newest that succeeded, and the JSON object the
    -- last successful run left (written by the fenced completion).
    prev_slot        timestamptz,
    last_success_at  timestamptz,
    state            jsonb,
    -- max_runs: done after this many runs; runs_done: the slots whose last attempt ended
    -- (docs/design/schedules.md).
    max_runs         integer CHECK (max_runs >= 1),
    runs_done        integer NOT NULL DEFAULT 0,
    -- key=value labels (`--label`), a JSON object of strings; blackout windows by label.
    labels           jsonb NOT NULL DEFAULT '{}'::jsonb
                     CONSTRAINT jobs_labels_check CHECK (jsonb_typeof(labels) = 'object'),
    -- Expectations (docs/design/expectations.md): how long a run may take, a wall-clock
    -- deadline in the job's zone, a bound relative to its kept runs, checks of its metrics.
    -- expect_marks: the events raised for the run of expect_slot (once per run);
    -- expect_state: the job's health, since expect_state_at.
    expect_max_s     double precision CHECK (expect_max_s > 0),
    expect_min_s     double precision CHECK (expect_min_s > 0),
    deadline         text CHECK (deadline ~ '^([01][0-9]|2[0-3]):[0-5][0-9]$'),
    expect_baseline  double precision CHECK (expect_baseline >= 1),
    asserts          text CHECK (asserts <> ''),
    assert_fails     boolean NOT NULL DEFAULT false,
    expect_slot      timestamptz,
    expect_marks     text[],
    expect_state     text CHECK (expect_state IN ('ok', 'slow', 'overdue', 'too_fast',
                                                  'assertion_failed')),
    expect_state_at  timestamptz,
    -- A watch job (docs/design/watch.md): never claimed (it lives in WATCH_SHARD, which no
    -- node locks); its runs are written by pings presenting the token whose sha256 is
    -- ping_hash. adopt_at: the first slot Pulse runs itself; the slots before stay watched.
    watch            boolean NOT NULL DEFAULT false,
    ping_hash        bytea CHECK (octet_length(ping_hash) = 32),
    adopt_at         timestamptz,
    -- The slot a /start ping opened that no end ping has closed yet.
    ping_open        timestamptz,
    -- The JSON Schema every payload of the job matches, checked by add, apply and trigger
    -- (docs/design/inputs.md); NULL: any JSON object.
    payload_schema   jsonb,
    -- The definition's revision (job_revisions; docs/design/revisions.md), and the one the
    -- slot in flight was claimed under, copied by the claim for the run row.
    revision         integer NOT NULL DEFAULT 1,
    run_revision     integer,
    -- What the job is for, in the user's words (`--description`).
    description      text,
    -- API tokens may trigger, rerun and feed the job (the API sets it on the jobs it writes).
    api_run          boolean NOT NULL DEFAULT false,
    -- The named limits it uses (0.3.0_pre_uses_named_limits, docs/design/limits.md), and the
    -- ids of the keys its running row holds.
    uses             text[] NOT NULL DEFAULT '{}',
    holds            bigint[],
    -- Which of its tenant's due slots a claim takes first, higher first, 0-100 (checked by
    -- the writers; docs/design/fairness.md, "Priorities").
    priority         integer NOT NULL DEFAULT 0,
    -- Each slot runs once on every live member (of `zones`): docs/design/each-node.md.
    each_node        boolean NOT NULL DEFAULT false,
    -- When the current timing was written (NULL: the one the job was created with): the
    -- walk onward from a slot before it goes to the timing's first slot after it
    -- (docs/design/time.md, "A new timing over a kept slot").
    timing_from      timestamptz,
    -- When a calendar or window change last rewrote calendar_rule: a completion of a slot
    -- claimed before it leaves the skips ahead of its old rule to the new one
    -- (docs/design/calendars.md, "A change while a slot runs").
    rule_changed_at  timestamptz,
    -- Where an apply that changed the timing of the running job planned it to go on, and
    -- that slot's start: the completion of a slot claimed before timing_from goes there
    -- (docs/design/time.md, "A new timing over a running slot").
    timing_slot      timestamptz,
    timing_start     timestamptz
) WITH (fillfactor = 80);

-- The claim's due range, for every status: an index on a column the claim writes would
-- make its update non-HOT (docs/design/claim-plan.md). Recovery reads running jobs here too.
CREATE INDEX jobs_due ON jobs (shard_id, next_run_at);
-- Fair fan-out's loose scan of the tenants with jobs in a shard (docs/design/fairness.md).
CREATE INDEX jobs_tenant_due ON jobs (shard_id, tenant_id, next_run_at);
-- The claim's loose scan of the priorities in a shard, and each one's due jobs; only jobs
-- with a priority, so a cluster without any pays one probe of an empty index per claim.
CREATE INDEX jobs_priority_due ON jobs (shard_id, priority DESC, next_run_at)
    WHERE priority > 0;
CREATE INDEX jobs_children ON jobs (parent_id) WHERE parent_id IS NOT NULL;
-- Every node reads the each-zone parents every few seconds: a probe, not a scan.
CREATE INDEX jobs_each_zone ON jobs (id) WHERE each_zone;
CREATE INDEX jobs_calendar ON jobs (calendar) WHERE calendar IS NOT NULL;
-- The late pass's expectations probe (node/maintenance/lateness.py).
CREATE INDEX jobs_expecting ON jobs (id)
    WHERE expect_max_s IS NOT NULL OR deadline IS NOT NULL OR expect_baseline IS NOT NULL;

CREATE UNIQUE INDEX jobs_ping ON jobs (ping_hash) WHERE ping_hash IS NOT NULL;

-- A legacy ping for a slot Pulse ran (or runs) itself: a double run (`pulse jobs adopt`).
CREATE TABLE watch_doubles (
    id        bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    job_id    uuid NOT NULL REFERENCES jobs (id) ON DELETE CASCADE,
    tenant_id text NOT NULL,
    job_name  text NOT NULL,
    slot      timestamptz NOT NULL,
    kind      text NOT NULL CHECK (kind IN ('start', 'success', 'fail')),
    pinged_at timestamptz NOT NULL DEFAULT now()
);

CREATE INDEX watch_doubles_job ON watch_doubles (job_id, slot);


-- == Backfills ===========================================================================

-- A request to run a job's slots of [range_from, range_to) again, oldest first; the nodes
-- holding its shard turn the slots before cursor_at into queued flights, at most
-- max_parallel in flight (docs/design/time.md).
CREATE TABLE backfills (
    id            bigserial PRIMARY KEY,
    job_id        uuid NOT NULL REFERENCES jobs (id) ON DELETE CASCADE,
    tenant_id     text NOT NULL,
    job_name      text NOT NULL,
    shard_id      integer NOT NULL CHECK (shard_id >= 0),
    range_from    timestamptz NOT NULL,
    range_to      timestamptz NOT NULL CHECK (range_to > range_from),
    cursor_at     timestamptz NOT NULL,
    only_missing  boolean NOT NULL DEFAULT false,
    max_parallel  integer NOT NULL DEFAULT 1 CHECK (max_parallel >= 1),
    slots_total   integer NOT NULL CHECK (slots_total >= 0),
    slots_queued  integer NOT NULL DEFAULT 0,
    status        text NOT NULL DEFAULT 'active'
                  CHECK (status IN ('active', 'done', 'cancelled')),
    created_at    timestamptz NOT NULL DEFAULT now(),
    updated_at    timestamptz NOT NULL DEFAULT now(),
    -- 'rerun': one past slot run again (`pulse jobs trigger --slot`).
    origin        text NOT NULL DEFAULT 'backfill' CHECK (origin IN ('backfill', 'rerun')),
    -- The input of the slots it queues (NULL: the job's payload).
    payload       jsonb
);

CREATE INDEX backfills_active ON backfills (shard_id) WHERE status = 'active';


-- == Flights =============================================================================

-- A slot of an overlap `allow` job (or of a backfill) in flight under a lease of its own,
-- so several slots of one job run at once; deleted when its last attempt ends
-- (docs/design/overlap.md).
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
    -- Who asked for the slot: NULL is the schedule.
    origin           text,
    backfill_id      bigint REFERENCES backfills (id) ON DELETE SET NULL,
    -- The tenant, if it has a limit: a flight deleted with its job can no longer look it up.
    limit_tenant     text,
    -- The expectation events raised for this slot's run (migration 024).
    expect_marks     text[],
    -- The slot's input, when one was given (trigger --payload, a rerun); NULL: the job's.
    payload          jsonb,
    -- The job's revision when the flight was made, for its run row.
    revision         integer,
    -- Its job's keys when it was made (NULL: none), and those its running row holds.
    uses_keys        bigint[],
    holds            bigint[],
    PRIMARY KEY (job_id, slot)
);

-- Claims of queued flights and recovery of running ones, per held shard.
CREATE INDEX flights_by_shard ON flights (shard_id, status, due_at);
CREATE INDEX flights_by_backfill ON flights (backfill_id) WHERE backfill_id IS NOT NULL;


-- == Each-node slots (docs/design/each-node.md) ==========================================

-- The roll-up of an each-node slot while its members' runs go on; deleted when it closes
-- (what it held is then in the slot's run row: its error and `output.coverage`).
CREATE TABLE node_slots (
    job_id    uuid NOT NULL REFERENCES jobs (id) ON DELETE CASCADE,
    slot      timestamptz NOT NULL,
    -- The members the slot was fanned out to: alive in the claiming node's view.
    members   text[] NOT NULL,
    -- Members whose run has not ended yet; the one that brings it to 0 closes the slot.
    pending   integer NOT NULL CHECK (pending >= 0),
    -- member -> {status, at, why}: succeeded, failed, timed_out, cancelled or missed.
    ended     jsonb NOT NULL DEFAULT '{}'::jsonb,
    opened_at timestamptz NOT NULL,
    origin    text,
    revision  integer,
    PRIMARY KEY (job_id, slot)
);

-- One member's run of an each-node slot, under a lease of its own (as a flight); deleted
-- when it ends or is recorded missed. Never claimed by another member.
CREATE TABLE node_runs (
    job_id           uuid NOT NULL REFERENCES jobs (id) ON DELETE CASCADE,
    slot             timestamptz NOT NULL,
    member           text NOT NULL,
    zone             text,
    -- The job's shard: the node holding it records the runs of dead members missed.
    shard_id         integer NOT NULL,
    status           text NOT NULL CHECK (status IN ('queued', 'running')),
    attempt          integer NOT NULL DEFAULT 1 CHECK (attempt >= 1),
    due_at           timestamptz NOT NULL,
    lease_token      bigint NOT NULL,
    locked_at        timestamptz,
    lease_expires_at timestamptz,
    cancel_by        text,
    PRIMARY KEY (job_id, slot, member)
);
-- A member's claim of its queued runs (claim_flights), and the recovery pass per shard.
CREATE INDEX node_runs_queued ON node_runs (member, due_at) WHERE status = 'queued';
CREATE INDEX node_runs_by_shard ON node_runs (shard_id);

-- The coverage of a slot as one line: the members that ran it (whatever the outcome) out
-- of those it was fanned out to, then each member that did not succeed, by name, e.g.
-- "node n2 missed (died 14:02:11)". Times are UTC.
CREATE FUNCTION node_slot_summary(members text[], ended jsonb) RETURNS text
LANGUAGE sql IMMUTABLE AS $$
    SELECT (SELECT count(*) FROM jsonb_each(ended) AS e(k, v)
            WHERE v ->> 'status' <> 'missed') || '/' || cardinality(members)
        || coalesce((SELECT string_agg(
               ', node ' || m || ' ' || CASE e ->> 'status'
                   WHEN 'missed' THEN 'missed (' || coalesce(e ->> 'why', 'unknown') || ' '
                       || to_char((e ->> 'at')::timestamptz AT TIME ZONE 'UTC', 'HH24:MI:SS')
                       || ')'
                   WHEN 'timed_out' THEN 'timed out'
                   ELSE coalesce(e ->> 'status', 'running') END, '' ORDER BY m)
            FROM unnest(members) AS m, LATERAL (SELECT ended -> m AS e) x
            WHERE e IS NULL OR e ->> 'status' <> 'succeeded'), '')
$$;

-- A member's run of an each-node slot ended with e_status ('missed': never ran, e_why
-- says why). Recorded once per member; the last closes the slot: its run row (succeeded
-- when every member that ran succeeded and one did, failed otherwise; the coverage as its
-- error (a complete one too), and under output.coverage), the slot of chained jobs
-- released by a success, `failed` raised for a failed slot and `incomplete` for one a
-- member missed, and the roll-up deleted. Returns the coverage once closed, else NULL.
-- A member's cancelled run makes the slot `cancelled`; a member's failure counts the slot
-- toward --pause-after-failures, a slot all that ran succeeded resets the count
-- (migration `0.3.0_pre_zones_each_node_compose`).
-- The roll-up's row lock orders concurrent ends: each sees the others' (test_each_node.py).
CREATE FUNCTION node_run_ended(
    e_job_id uuid,
    e_slot timestamptz,
    e_member text,
    e_status text,
    e_why text,
    e_node_id text,
    e_zone text,
    e_at timestamptz
) RETURNS text
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
DECLARE
    s node_slots;
    j jobs;
    coverage text;
    outcome text;
    ran integer;
    ok integer;
    failed integer;
    cancelled integer;
    note text;
BEGIN
    UPDATE node_slots SET pending = pending - 1,
        ended = ended || jsonb_build_object(e_member, jsonb_build_object(
            'status', e_status, 'at', e_at, 'why', e_why))
    WHERE job_id = e_job_id AND slot = e_slot AND NOT ended ? e_member
    RETURNING * INTO s;
    IF NOT FOUND OR s.pending > 0 THEN
        RETURN NULL;
    END IF;
    SELECT * INTO j FROM jobs WHERE id = e_job_id;
    coverage := node_slot_summary(s.members, s.ended);
    SELECT count(*) FILTER (WHERE v ->> 'status' <> 'missed'),
           count(*) FILTER (WHERE v ->> 'status' = 'succeeded'),
           count(*) FILTER (WHERE v ->> 'status' IN ('failed', 'timed_out')),
           count(*) FILTER (WHERE v ->> 'status' = 'cancelled')
    INTO ran, ok, failed, cancelled FROM jsonb_each(s.ended) AS e(k, v);
    outcome := CASE WHEN cancelled > 0 THEN 'cancelled'
                    WHEN ok > 0 AND ok = ran THEN 'succeeded' ELSE 'failed' END;
    PERFORM record_run(j.id, j.tenant_id, j.name, s.slot, 1, e_node_id, e_zone, outcome, NULL,
                       s.opened_at, e_at, extract(epoch FROM e_at - s.opened_at)::float8,
                       coverage,
                       jsonb_build_object('coverage', jsonb_build_object(
                           'summary', coverage, 'members', to_jsonb(s.members),
                           'ended', s.ended)),
                       s.origin, s.revision);
    IF outcome = 'succeeded' AND j.feeds THEN  -- the slot of the jobs chained after it
        PERFORM chain_release(j.id, s.slot, e_at);
    END IF;
    IF outcome = 'failed' THEN
        PERFORM raise_alert('failed', j.id, j.tenant_id, j.name, s.slot, 1, e_node_id, e_zone,
                            coverage, NULL);
    END IF;
    -- --pause-after-failures: a member's failure makes the slot one failed slot; a slot
    -- every member that ran succeeded resets the count; a cancelled slot, or one no member
    -- ran, does neither (as a cancelled or lost ordinary run). The job row is read again
    -- under its lock: two slots closing at once count one after the other.
    IF outcome = 'failed' AND failed > 0 OR outcome = 'succeeded' AND j.failed_slots > 0 THEN
        SELECT * INTO j FROM jobs WHERE id = e_job_id FOR UPDATE;
    END IF;
    IF outcome = 'failed' AND failed > 0 THEN
        IF NOT j.paused AND j.failed_slots + 1 >= j.pause_after_failures THEN
            note := 'paused after ' || j.failed_slots + 1
                || ' failed slots in a row; last error: ' || left(coverage, 300);
            UPDATE jobs SET failed_slots = failed_slots + 1, paused = true, pause_note = note,
                status = CASE WHEN status IN ('running', 'done') THEN status ELSE 'paused' END,
                next_run_at = CASE WHEN status = 'running' THEN next_run_at
                                   ELSE '9999-01-01Z'::timestamptz END,
                updated_at = e_at
            WHERE id = j.id;
            PERFORM raise_alert('paused', j.id, j.tenant_id, j.name, s.slot, 1, e_node_id,
                                e_zone, coverage, note);
        ELSE
            UPDATE jobs SET failed_slots = failed_slots + 1 WHERE id = j.id;
        END IF;
    ELSIF outcome = 'succeeded' AND j.failed_slots > 0 THEN
        UPDATE jobs SET failed_slots = 0 WHERE id = j.id;
        PERFORM raise_alert('recovered', j.id, j.tenant_id, j.name, s.slot, 1, e_node_id,
                            e_zone, NULL, 'succeeded after ' || j.failed_slots || ' failed slots');
    END IF;
    IF ran < cardinality(s.members) THEN  -- a member missed it
        PERFORM raise_alert('incomplete', j.id, j.tenant_id, j.name, s.slot, 1, e_node_id,
                            e_zone, NULL, coverage);
    END IF;
    DELETE FROM node_slots WHERE job_id = e_job_id AND slot = e_slot;
    RETURN coverage;
END $$;

-- `pulse runs cancel` of an each-node slot, as the owner (the web's role only reads
-- node_runs; migration `0.3.0_pre_zones_each_node_compose`): every member's run of the
-- open slot (p_slot, else each open one) of one job in the caller's scope is marked
-- cancel_by; running ones are returned for the caller to wake their members, queued ones
-- end at once, cancelled, never started.
CREATE FUNCTION cancel_node_runs(
    p_tenant text,
    p_name text,
    p_scope text,
    p_slot timestamptz,
    p_by text,
    p_now timestamptz
) RETURNS TABLE (c_job uuid, c_slot timestamptz, c_member text, c_attempt integer,
                 c_token bigint, c_started boolean)
LANGUAGE plpgsql SECURITY DEFINER AS $$
#variable_conflict use_column
DECLARE
    t timestamptz := CASE WHEN p_now IS NOT NULL
                               AND has_table_privilege(session_user, 'node_runs', 'DELETE')
                          THEN p_now ELSE now() END;
BEGIN
    UPDATE node_runs n SET cancel_by = p_by
    FROM jobs j
    WHERE j.tenant_id = p_tenant AND j.name = p_name AND n.job_id = j.id
      AND (p_scope IS NULL OR j.tenant_id = p_scope)
      AND (p_slot IS NULL OR n.slot = p_slot);
    RETURN QUERY
    SELECT n.job_id, n.slot, n.member, n.attempt, n.lease_token, true
    FROM node_runs n JOIN jobs j ON j.id = n.job_id
    WHERE j.tenant_id = p_tenant AND j.name = p_name AND n.status = 'running'
      AND n.cancel_by = p_by AND (p_slot IS NULL OR n.slot = p_slot);
    RETURN QUERY
    WITH gone AS (
        DELETE FROM node_runs n USING jobs j
        WHERE j.tenant_id = p_tenant AND j.name = p_name AND n.job_id = j.id
          AND n.status = 'queued' AND n.cancel_by = p_by
          AND (p_slot IS NULL OR n.slot = p_slot)
        RETURNING n.job_id, n.slot, n.member, n.attempt, n.lease_token
    )
    SELECT g.job_id, g.slot, g.member, g.attempt, g.lease_token, false
    FROM gone g
    CROSS JOIN LATERAL (SELECT node_run_ended(g.job_id, g.slot, g.member, 'cancelled',
                                              'cancelled by ' || p_by, NULL, NULL, t)) AS e
    ORDER BY g.slot, g.member;
END $$;

DO $$
BEGIN
    EXECUTE format('ALTER FUNCTION cancel_node_runs(text, text, text, timestamptz, text, '
                   'timestamptz) SET search_path = %I, pg_temp', current_schema());
END $$;


-- == Runs ================================================================================

-- The history: one row per (job, slot), written when an attempt ends and rewritten by a
-- later attempt of the slot. No foreign key to jobs: every run row is written from a job
-- row updated in the same statement, and a key checked per row cost every completion;
-- jobs_forget_runs deletes a job's history with it.
CREATE TABLE runs (
    id            bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    job_id        uuid NOT NULL,
    tenant_id     text NOT NULL,
    job_name      text NOT NULL,
    scheduled_for timestamptz NOT NULL,
    attempt       integer NOT NULL DEFAULT 1,
    node_id       text,
    zone          text,
    -- Added NOT VALID by a migration, to spare a scan of the whole table under lock.
    status        text NOT NULL
                  CONSTRAINT runs_status_check
                  CHECK (status IN ('running', 'succeeded', 'failed', 'timed_out', 'skipped',
                                    'lost', 'cancelled')),
    lease_token   bigint,
    started_at    timestamptz,
    finished_at   timestamptz,
    duration_s    double precision,
    last_error    text,
    -- What the run produced: {"stdout", "stderr", "result", "log", "truncated"}.
    output        jsonb,
    -- Why the slot ran: NULL is its schedule ('trigger', 'catch-up', 'backfill').
    origin        text,
    -- The job's revision the slot was claimed under (NULL: claimed by a node older than
    -- migration 029).
    revision      integer,
    UNIQUE (job_id, scheduled_for),
    -- The states later writes of the row replaced, oldest first: [{status, attempt, node,
    -- token, error, origin, started, replaced_at}] (runs_keep_history; NULL: never
    -- rewritten).
    history       jsonb,
    -- A skipped record standing for the slots before it that have no row: every slot of
    -- the job from this time up to scheduled_for was skipped too, for the same reason
    -- (catch-up and apply list at most the newest 1,000; migration
    -- 0.3.0_pre_zzzz_skipped_from, docs/design/audit.md).
    skipped_from  timestamptz CONSTRAINT runs_skipped_from_check
                  CHECK (skipped_from < scheduled_for)
);

-- Recent runs of a job use UNIQUE (job_id, scheduled_for) backwards. Runs by status serve
-- the rare outcomes only: successes, nearly every row written, skip that index.
CREATE INDEX runs_by_status ON runs (status, scheduled_for DESC) WHERE status <> 'succeeded';
CREATE INDEX runs_recent ON runs (scheduled_for DESC);
-- The audit's read of the skipped records that stand for more slots (skipped_from).
CREATE INDEX runs_skipped_from ON runs (job_id, scheduled_for) WHERE skipped_from IS NOT NULL;

-- A statement trigger, after the job rows are gone: its DELETE takes a fresh snapshot, so
-- it also sees run rows committed meanwhile by completions in flight.
-- SECURITY DEFINER: a role that may delete jobs (pulse_web) needs no right on runs.
CREATE FUNCTION forget_deleted_jobs_runs() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path FROM CURRENT AS $$
BEGIN
    DELETE FROM runs r USING deleted_jobs d WHERE r.job_id = d.id;
    RETURN NULL;
END
$$;

CREATE TRIGGER jobs_forget_runs AFTER DELETE ON jobs
REFERENCING OLD TABLE AS deleted_jobs
FOR EACH STATEMENT EXECUTE FUNCTION forget_deleted_jobs_runs();

-- A rewrite of a run row (the slot's next attempt, a watch run's end, a cancel) keeps the
-- state it replaces, so `pulse audit` tells a retry, a re-run after a node's death and an
-- overwritten final record apart (docs/design/audit.md). Rewrites only: a first write pays
-- nothing.
CREATE FUNCTION run_history_keep() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    NEW.history := coalesce(OLD.history, '[]'::jsonb) || jsonb_build_array(jsonb_build_object(
        'status', OLD.status, 'attempt', OLD.attempt, 'node', OLD.node_id,
        'token', OLD.lease_token, 'error', left(OLD.last_error, 300), 'origin', OLD.origin,
        'started', OLD.started_at, 'replaced_at', coalesce(NEW.finished_at, now())));
    RETURN NEW;
END
$$;

CREATE TRIGGER runs_keep_history BEFORE UPDATE ON runs
FOR EACH ROW WHEN ((OLD.status, OLD.attempt, OLD.lease_token)
                   IS DISTINCT FROM (NEW.status, NEW.attempt, NEW.lease_token))
EXECUTE FUNCTION run_history_keep();

-- The run row of an attempt that ended, with the slot's origin, for complete, release and
-- recover alike.
CREATE FUNCTION record_run(
    run_job_id uuid,
    run_tenant_id text,
    run_job_name text,
    run_scheduled_for timestamptz,
    run_attempt integer,
    run_node_id text,
    run_zone text,
    run_status text,
    run_lease_token bigint,
    run_started_at timestamptz,
    run_finished_at timestamptz,
    run_duration_s double precision,
    run_last_error text,
    run_output jsonb,
    run_origin text
) RETURNS void
LANGUAGE sql SET search_path FROM CURRENT AS $$
    INSERT INTO runs AS r (job_id, tenant_id, job_name, scheduled_for, attempt, node_id, zone,
                           status, lease_token, started_at, finished_at, duration_s,
                           last_error, output, origin)
    VALUES (run_job_id, run_tenant_id, run_job_name, run_scheduled_for, run_attempt,
            run_node_id, run_zone, run_status, run_lease_token, run_started_at,
            run_finished_at, run_duration_s, run_last_error, run_output, run_origin)
    ON CONFLICT (job_id, scheduled_for) DO UPDATE SET
        attempt = excluded.attempt,
        node_id = excluded.node_id,
        zone = excluded.zone,
        status = excluded.status,
        lease_token = excluded.lease_token,
        started_at = excluded.started_at,
        finished_at = excluded.finished_at,
        duration_s = excluded.duration_s,
        last_error = excluded.last_error,
        output = excluded.output,
        origin = excluded.origin
$$;


-- The run row of an attempt that ended, with the revision its slot was claimed under.
CREATE FUNCTION record_run(
    run_job_id uuid,
    run_tenant_id text,
    run_job_name text,
    run_scheduled_for timestamptz,
    run_attempt integer,
    run_node_id text,
    run_zone text,
    run_status text,
    run_lease_token bigint,
    run_started_at timestamptz,
    run_finished_at timestamptz,
    run_duration_s double precision,
    run_last_error text,
    run_output jsonb,
    run_origin text,
    run_revision integer
) RETURNS void
LANGUAGE sql SET search_path FROM CURRENT AS $$
    INSERT INTO runs AS r (job_id, tenant_id, job_name, scheduled_for, attempt, node_id, zone,
                           status, lease_token, started_at, finished_at, duration_s,
                           last_error, output, origin, revision)
    VALUES (run_job_id, run_tenant_id, run_job_name, run_scheduled_for, run_attempt,
            run_node_id, run_zone, run_status, run_lease_token, run_started_at,
            run_finished_at, run_duration_s, run_last_error, run_output, run_origin,
            run_revision)
    ON CONFLICT (job_id, scheduled_for) DO UPDATE SET
        attempt = excluded.attempt,
        node_id = excluded.node_id,
        zone = excluded.zone,
        status = excluded.status,
        lease_token = excluded.lease_token,
        started_at = excluded.started_at,
        finished_at = excluded.finished_at,
        duration_s = excluded.duration_s,
        last_error = excluded.last_error,
        output = excluded.output,
        origin = excluded.origin,
        revision = excluded.revision
$$;

-- The versions without the origin (005) and without the output either (007), for nodes of
-- main from before 016 that a rolling upgrade finds running: 015 and 016 dropped them,
-- 0.2.0 brings them back until a post-migration drops them once no such node can run.
CREATE FUNCTION record_run(
    run_job_id uuid,
    run_tenant_id text,
    run_job_name text,
    run_scheduled_for timestamptz,
    run_attempt integer,
    run_node_id text,
    run_zone text,
    run_status text,
    run_lease_token bigint,
    run_started_at timestamptz,
    run_finished_at timestamptz,
    run_duration_s double precision,
    run_last_error text
) RETURNS void
LANGUAGE sql SET search_path FROM CURRENT AS $$
    INSERT INTO runs AS r (job_id, tenant_id, job_name, scheduled_for, attempt, node_id, zone,
                           status, lease_token, started_at, finished_at, duration_s,
                           last_error)
    VALUES (run_job_id, run_tenant_id, run_job_name, run_scheduled_for, run_attempt,
            run_node_id, run_zone, run_status, run_lease_token, run_started_at,
            run_finished_at, run_duration_s, run_last_error)
    ON CONFLICT (job_id, scheduled_for) DO UPDATE SET
        attempt = excluded.attempt,
        node_id = excluded.node_id,
        zone = excluded.zone,
        status = excluded.status,
        lease_token = excluded.lease_token,
        started_at = excluded.started_at,
        finished_at = excluded.finished_at,
        duration_s = excluded.duration_s,
        last_error = excluded.last_error
$$;

CREATE FUNCTION record_run(
    run_job_id uuid,
    run_tenant_id text,
    run_job_name text,
    run_scheduled_for timestamptz,
    run_attempt integer,
    run_node_id text,
    run_zone text,
    run_status text,
    run_lease_token bigint,
    run_started_at timestamptz,
    run_finished_at timestamptz,
    run_duration_s double precision,
    run_last_error text,
    run_output jsonb
) RETURNS void
LANGUAGE sql SET search_path FROM CURRENT AS $$
    INSERT INTO runs AS r (job_id, tenant_id, job_name, scheduled_for, attempt, node_id, zone,
                           status, lease_token, started_at, finished_at, duration_s,
                           last_error, output)
    VALUES (run_job_id, run_tenant_id, run_job_name, run_scheduled_for, run_attempt,
            run_node_id, run_zone, run_status, run_lease_token, run_started_at,
            run_finished_at, run_duration_s, run_last_error, run_output)
    ON CONFLICT (job_id, scheduled_for) DO UPDATE SET
        attempt = excluded.attempt,
        node_id = excluded.node_id,
        zone = excluded.zone,
        status = excluded.status,
        lease_token = excluded.lease_token,
        started_at = excluded.started_at,
        finished_at = excluded.finished_at,
        duration_s = excluded.duration_s,
        last_error = excluded.last_error,
        output = excluded.output
$$;


-- The skipped records a pause (of a job that owes slots), skip-next or a job planned afresh
-- writes, as the owner: the web's role writes no runs (migration
-- `0.3.0_pre_web_skips_and_triggers`). Only `skipped` rows with a reason, for one idle or
-- paused job in the caller's tenant scope (or a running one, for slots after the one it
-- runs: an apply's new timing passes them, migration
-- `0.3.0_pre_zzzzzzzzz_changed_while_running`; or a done one, for slots from the one it
-- stopped at: an apply that lowers its max_runs to its runs passes them, migration
-- `0.3.0_pre_zzzzzzzzzz_max_runs_lowered`), never over a record, and only for slots
-- still to be decided: at or after the job's slot, or still to come by the database's clock (any
-- slot for a login that may insert runs itself: the owner, a node). An entry is [slot,
-- reason] or [slot, reason, skipped_from] (migration 0.3.0_pre_zzzz_skipped_from), the
-- time honoured from the job's slot up to the database's clock (any, for such a login).
CREATE FUNCTION record_skipped(
    p_job uuid,
    p_scope text,
    p_skips json,
    p_now timestamptz
) RETURNS TABLE (skipped_slot timestamptz)
LANGUAGE sql SECURITY DEFINER AS $$
    INSERT INTO runs (job_id, tenant_id, job_name, scheduled_for, attempt, status,
                      finished_at, last_error, skipped_from)
    SELECT j.id, j.tenant_id, j.name, (e->>0)::timestamptz, 1, 'skipped',
           coalesce(p_now, now()), e->>1,
           CASE WHEN (e->>2)::timestamptz >= j.slot_at AND (e->>2)::timestamptz <= now()
                     OR has_table_privilege(session_user, 'runs', 'INSERT')
                THEN (e->>2)::timestamptz END
    FROM jobs j CROSS JOIN json_array_elements(p_skips) AS e
    WHERE j.id = p_job AND (p_scope IS NULL OR j.tenant_id = p_scope)
      AND (j.status IN ('idle', 'paused')
           OR (j.status = 'running' AND (e->>0)::timestamptz > j.slot_at)
           OR (j.status = 'done' AND (e->>0)::timestamptz >= j.slot_at))
      AND ((e->>0)::timestamptz >= j.slot_at OR (e->>0)::timestamptz > now()
           OR has_table_privilege(session_user, 'runs', 'INSERT'))
      AND nullif(e->>1, '') IS NOT NULL
      AND ((e->>2) IS NULL OR (e->>2)::timestamptz < (e->>0)::timestamptz)
    ON CONFLICT (job_id, scheduled_for) DO NOTHING
    RETURNING scheduled_for
$$;

-- The skips a job's calendar or windows recorded ahead of their slot, taken back as the
-- owner when a calendar or window change or a new timing plans the job again (migration
-- `0.3.0_pre_zzzzzz_withdraw_rule_skips`): `skipped` rows with a calendar's or a window's
-- reason, of slots after the clock (the database's, or the caller's for a login that may
-- delete runs itself), for one job in the caller's tenant scope that is paused (migration
-- `0.3.0_pre_zzzzzzz_withdraw_paused`: planned afresh when it resumes), or idle on its
-- first attempt and not triggered (one paused until a time included, planned again from
-- that time: migration `0.3.0_pre_zzzzzzzz_withdraw_paused_until`).
CREATE FUNCTION withdraw_rule_skips(
    p_job uuid,
    p_scope text,
    p_now timestamptz
) RETURNS TABLE (withdrawn_slot timestamptz)
LANGUAGE sql SECURITY DEFINER AS $$
    DELETE FROM runs r
    USING jobs j
    WHERE j.id = p_job AND (p_scope IS NULL OR j.tenant_id = p_scope) AND r.job_id = j.id
      AND r.status = 'skipped'
      AND (r.last_error LIKE 'calendar %' OR r.last_error LIKE 'blackout window %')
      AND r.scheduled_for > CASE WHEN has_table_privilege(session_user, 'runs', 'DELETE')
                                 THEN coalesce(p_now, now()) ELSE now() END
      AND (j.status = 'paused'
           OR (j.status = 'idle' AND j.attempt = 1
               AND j.slot_origin IS DISTINCT FROM 'trigger'))
    RETURNING r.scheduled_for
$$;

-- A trigger's flight (a payload, a gated or chained job, a job past skip-next's records),
-- queued as the owner: the web's role may not insert flights (migration
-- `0.3.0_pre_web_skips_and_triggers`). One queued flight of origin `trigger`, for one job in
-- the caller's tenant scope, at the database's clock (p_now only for a login that may
-- insert flights itself), at most 10 waiting.
CREATE FUNCTION trigger_flight(
    p_job uuid,
    p_scope text,
    p_payload jsonb,
    p_now timestamptz,
    p_most integer
) RETURNS TABLE (flight_slot timestamptz)
LANGUAGE sql SECURITY DEFINER AS $$
    INSERT INTO flights (job_id, slot, shard_id, status, attempt, due_at, lease_token, origin,
                         payload, revision)
    SELECT j.id, k.t, j.shard_id, 'queued', 1, k.t, j.lease_token, 'trigger', p_payload,
           j.revision
    FROM jobs j
    CROSS JOIN (SELECT CASE WHEN p_now IS NOT NULL
                             AND has_table_privilege(session_user, 'flights', 'INSERT')
                            THEN p_now ELSE now() END AS t) AS k
    WHERE j.id = p_job AND (p_scope IS NULL OR j.tenant_id = p_scope)
      AND (SELECT count(*) FROM flights f
           WHERE f.job_id = j.id AND f.origin = 'trigger' AND f.status = 'queued')
          < least(p_most, 10)
    ON CONFLICT (job_id, slot) DO NOTHING
    RETURNING slot
$$;

-- == Alerts ==============================================================================

-- Rules say who wants which events; events are an outbox written in the same transaction
-- as the state change they report; a delivery is one event for one rule
-- (docs/design/alerts.md).
CREATE TABLE alert_rules (
    name       text PRIMARY KEY CHECK (name <> ''),
    url        text NOT NULL,
    events     text[] NOT NULL,
    format     text NOT NULL DEFAULT 'json'
               CHECK (format IN ('json', 'slack', 'pagerduty', 'email')),
    secret_env text,  -- the NAME of a variable on the delivering node, never its value
    tenant_id  text,  -- NULL: every tenant
    job_name   text,  -- NULL: every job of the tenant scope
    created_at timestamptz NOT NULL DEFAULT now(),
    -- Also send X-Pulse-Signature (the body's HMAC alone, replayable): opt-in per rule.
    legacy_signature boolean NOT NULL DEFAULT false
);

CREATE TABLE alert_events (
    id         uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    -- slow, overdue, too_fast, assertion_failed: run-time expectations (migration 024);
    -- double_run: a legacy ping for a slot Pulse runs (migration 025); incomplete: an
    -- every-node slot a member missed (migration `0.3.0_pre_zones_each_node`).
    event      text NOT NULL
               CONSTRAINT alert_events_event_check
               CHECK (event IN ('failed', 'recovered', 'lost', 'late', 'skipped', 'paused',
                                'slow', 'overdue', 'too_fast', 'assertion_failed',
                                'double_run', 'incomplete')),
    job_id     uuid,
    tenant_id  text NOT NULL,
    job_name   text NOT NULL,
    slot       timestamptz,
    attempt    integer,
    node_id    text,
    zone       text,
    error      text,
    detail     text,
    created_at timestamptz NOT NULL DEFAULT now()
);

CREATE INDEX alert_events_created ON alert_events (created_at);

CREATE TABLE alert_deliveries (
    id              bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,  -- delivery order
    event_id        uuid NOT NULL REFERENCES alert_events (id) ON DELETE CASCADE,
    rule_name       text NOT NULL REFERENCES alert_rules (name) ON DELETE CASCADE,
    job_id          uuid,
    status          text NOT NULL DEFAULT 'pending'
                    CHECK (status IN ('pending', 'delivered', 'failed')),
    attempts        integer NOT NULL DEFAULT 0,
    next_attempt_at timestamptz NOT NULL DEFAULT now(),
    locked_by       text,
    locked_until    timestamptz,
    last_error      text,
    delivered_at    timestamptz,
    created_at      timestamptz NOT NULL DEFAULT now(),
    UNIQUE (event_id, rule_name)
);

CREATE INDEX alert_deliveries_pending ON alert_deliveries (next_attempt_at)
    WHERE status = 'pending';
-- Order per job: only the oldest pending delivery of each (rule, job) can be leased.
CREATE INDEX alert_deliveries_by_rule_job ON alert_deliveries (rule_name, job_id, id)
    WHERE status = 'pending';

-- The outbox write: an event and one delivery per rule that wants it, in the caller's
-- transaction; nothing is written (or sent) when no rule wants it.
CREATE FUNCTION raise_alert(
    a_event text,
    a_job_id uuid,
    a_tenant_id text,
    a_job_name text,
    a_slot timestamptz,
    a_attempt integer,
    a_node_id text,
    a_zone text,
    a_error text,
    a_detail text
) RETURNS void
LANGUAGE sql SET search_path FROM CURRENT AS $$
    WITH wanted AS (
        SELECT name FROM alert_rules
        WHERE a_event = ANY (events)
          AND (tenant_id IS NULL OR tenant_id = a_tenant_id)
          AND (job_name IS NULL OR job_name = a_job_name)
    ), event AS (
        INSERT INTO alert_events (event, job_id, tenant_id, job_name, slot, attempt, node_id,
                                  zone, error, detail)
        SELECT a_event, a_job_id, a_tenant_id, a_job_name, a_slot, a_attempt, a_node_id,
               a_zone, a_error, a_detail
        WHERE EXISTS (SELECT 1 FROM wanted)
        RETURNING id
    ), queued AS (
        INSERT INTO alert_deliveries (event_id, rule_name, job_id)
        SELECT event.id, wanted.name, a_job_id FROM event CROSS JOIN wanted
        RETURNING 1
    )
    -- Delivered at commit, once per transaction however many events it raised.
    SELECT pg_notify(current_schema() || '_wake', 'alerts')
    FROM (SELECT 1 FROM queued LIMIT 1) AS q
$$;

-- What a ping writes, for the web, whose role may not write runs or alert events itself:
-- only the run of the job whose token hash it presents, and only a watched slot's; a slot
-- from adopt_at on is recorded as a double run and raises `double_run` instead. p_late: the
-- `late` event's detail when the ping came for the awaited slot past its late_after_s
-- (before the late pass saw it). A ping for a slot whose record is terminal (declared missed,
-- or ended already) is noted on it, never rewrites it (migration
-- `0.3.0_pre_watch_record_keeps_terminal`). Returns 'recorded', 'late' (noted), 'double_run',
-- or NULL for an unknown hash.
CREATE FUNCTION watch_record(
    p_hash bytea,
    p_slot timestamptz,
    p_kind text,
    p_started_at timestamptz,
    p_finished_at timestamptz,
    p_output jsonb,
    p_error text,
    p_late text
) RETURNS text
LANGUAGE plpgsql SECURITY DEFINER AS $$
DECLARE
    j jobs;
    v_event text;
    v_detail text;
BEGIN
    SELECT * INTO j FROM jobs WHERE ping_hash = p_hash;
    IF NOT FOUND OR p_kind NOT IN ('start', 'success', 'fail') THEN
        RETURN NULL;
    END IF;
    IF j.adopt_at IS NOT NULL AND p_slot >= j.adopt_at THEN
        INSERT INTO watch_doubles (job_id, tenant_id, job_name, slot, kind, pinged_at)
        VALUES (j.id, j.tenant_id, j.name, p_slot, p_kind, p_finished_at);
        v_event := 'double_run';
        v_detail := 'a legacy ' || p_kind || ' ping arrived for a slot Pulse runs';
    ELSE
        -- As record_run does, written out: this function runs as the owner, and calls
        -- nothing whose search_path a caller's temporary tables could come first in.
        INSERT INTO runs AS r (job_id, tenant_id, job_name, scheduled_for, attempt, status,
                               started_at, finished_at, duration_s, last_error, output, origin)
        VALUES (j.id, j.tenant_id, j.name, p_slot, 1,
                CASE p_kind WHEN 'start' THEN 'running'
                            WHEN 'success' THEN 'succeeded' ELSE 'failed' END,
                p_started_at, CASE WHEN p_kind = 'start' THEN NULL ELSE p_finished_at END,
                CASE WHEN p_kind = 'start' OR p_started_at IS NULL THEN NULL
                     ELSE extract(epoch FROM p_finished_at - p_started_at)::float8 END,
                p_error, p_output, 'ping')
        ON CONFLICT (job_id, scheduled_for) DO UPDATE SET
            attempt = excluded.attempt, node_id = NULL, zone = NULL, status = excluded.status,
            lease_token = NULL, started_at = excluded.started_at,
            finished_at = excluded.finished_at, duration_s = excluded.duration_s,
            last_error = excluded.last_error, output = excluded.output, origin = excluded.origin
        WHERE r.status = 'running';
        IF NOT FOUND THEN  -- the slot's record is terminal: the ping is noted on it
            UPDATE runs SET
                last_error = concat_ws('; ', last_error, 'a ' || p_kind || ' ping came '
                                       || round(extract(epoch FROM p_finished_at - p_slot))
                                       || 's after its slot'),
                output = coalesce(output, p_output)
            WHERE job_id = j.id AND scheduled_for = p_slot;
            RETURN 'late';
        END IF;
        IF p_late IS NULL OR j.late_slot IS NOT DISTINCT FROM p_slot THEN
            RETURN 'recorded';
        END IF;
        v_event := 'late';
        v_detail := p_late;
    END IF;
    -- As raise_alert does: an event only if a rule wants it, and its deliveries.
    WITH wanted AS (
        SELECT name FROM alert_rules
        WHERE v_event = ANY (events)
          AND (tenant_id IS NULL OR tenant_id = j.tenant_id)
          AND (job_name IS NULL OR job_name = j.name)
    ), raised AS (
        INSERT INTO alert_events (event, job_id, tenant_id, job_name, slot, attempt, detail)
        SELECT v_event, j.id, j.tenant_id, j.name, p_slot,
               CASE WHEN v_event = 'late' THEN 1 END, v_detail
        WHERE EXISTS (SELECT 1 FROM wanted)
        RETURNING id
    )
    INSERT INTO alert_deliveries (event_id, rule_name, job_id)
    SELECT raised.id, wanted.name, j.id FROM raised CROSS JOIN wanted;
    RETURN CASE WHEN v_event = 'double_run' THEN 'double_run' ELSE 'recorded' END;
END $$;

-- A definer's search_path: the schema, then pg_temp (never a caller's temporary table first).
DO $$
BEGIN
    EXECUTE format('ALTER FUNCTION watch_record(bytea, timestamptz, text, timestamptz, '
                   'timestamptz, jsonb, text, text) SET search_path = %I, pg_temp',
                   current_schema());
END $$;

-- A watch run without its end ping fails at its timeout; a terminal watched run is never
-- rewritten by a ping (migration `0.2.0_pre_watch_timeouts`).

-- A watched run past its timeout, closed as if its run had been stopped then: finished at
-- started_at + timeout, one `failed` event. False when it is not running or not overdue.
-- Invoker (the node's late pass); watch_end runs it as the owner, so it writes its event
-- as raise_alert does rather than calling it, whose search_path would let a caller's
-- temporary tables come first (docs/design/roles.md), and has the definers' search_path.
CREATE FUNCTION watch_time_out(p_run_id bigint, p_now timestamptz) RETURNS boolean
LANGUAGE plpgsql AS $$
DECLARE
    c record;
BEGIN
    UPDATE runs r SET
        status = 'timed_out',
        finished_at = r.started_at + make_interval(secs => j.timeout_s),
        duration_s = j.timeout_s,
        last_error = 'no end ping within ' || j.timeout_s || 's of its /start (watch job)'
    FROM jobs j
    WHERE r.id = p_run_id AND j.id = r.job_id AND r.status = 'running' AND r.origin = 'ping'
      AND r.started_at + make_interval(secs => j.timeout_s) < p_now
    RETURNING r.job_id, r.tenant_id, r.job_name, r.scheduled_for, r.attempt, r.last_error
    INTO c;
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    WITH wanted AS (
        SELECT name FROM alert_rules
        WHERE 'failed' = ANY (events)
          AND (tenant_id IS NULL OR tenant_id = c.tenant_id)
          AND (job_name IS NULL OR job_name = c.job_name)
    ), raised AS (
        INSERT INTO alert_events (event, job_id, tenant_id, job_name, slot, attempt, error)
        SELECT 'failed', c.job_id, c.tenant_id, c.job_name, c.scheduled_for, c.attempt,
               c.last_error
        WHERE EXISTS (SELECT 1 FROM wanted)
        RETURNING id
    )
    INSERT INTO alert_deliveries (event_id, rule_name, job_id)
    SELECT raised.id, wanted.name, c.job_id FROM raised CROSS JOIN wanted;
    IF FOUND THEN  -- delivered at commit, as raise_alert wakes the nodes (migration 028)
        PERFORM pg_notify(current_schema() || '_wake', 'alerts');
    END IF;
    RETURN true;
END $$;

-- An end ping (p_kind success or fail) for the run of p_slot that a /start opened, for the
-- web, whose role may not write runs: only a run of the job whose token hash it presents.
-- In time: the run ends as the ping says ('recorded'). Past the timeout, or after the run
-- was cancelled: the run keeps its outcome (timed out first if no pass did it yet), and
-- the ping is noted on it, its body kept as the output ('late'). NULL: no such run, or one
-- an end ping ended already (the caller files the ping by its time).
CREATE FUNCTION watch_end(
    p_hash bytea,
    p_slot timestamptz,
    p_kind text,
    p_at timestamptz,
    p_output jsonb,
    p_error text
) RETURNS text
LANGUAGE plpgsql SECURITY DEFINER AS $$
DECLARE
    j jobs;
    r runs;
BEGIN
    SELECT * INTO j FROM jobs WHERE ping_hash = p_hash;
    IF NOT FOUND OR p_kind NOT IN ('success', 'fail') THEN
        RETURN NULL;
    END IF;
    SELECT * INTO r FROM runs
    WHERE job_id = j.id AND scheduled_for = p_slot AND origin = 'ping'
      AND started_at IS NOT NULL
    FOR UPDATE;
    IF NOT FOUND THEN
        RETURN NULL;
    END IF;
    IF r.status = 'running' AND p_at <= r.started_at + make_interval(secs => j.timeout_s) THEN
        UPDATE runs SET
            status = CASE p_kind WHEN 'success' THEN 'succeeded' ELSE 'failed' END,
            finished_at = p_at,
            duration_s = extract(epoch FROM p_at - r.started_at)::float8,
            last_error = p_error,
            output = p_output
        WHERE id = r.id;
        RETURN 'recorded';
    END IF;
    IF r.status = 'running' THEN
        PERFORM watch_time_out(r.id, p_at);
        SELECT * INTO r FROM runs WHERE id = r.id;
    END IF;
    IF r.status NOT IN ('timed_out', 'cancelled') THEN
        RETURN NULL;
    END IF;
    UPDATE runs SET
        last_error = concat_ws('; ', r.last_error, 'its end ping (' || p_kind || ') came '
                               || round(extract(epoch FROM p_at - r.started_at))
                               || 's after its /start'),
        output = coalesce(p_output, r.output)
    WHERE id = r.id;
    RETURN 'late';
END $$;

-- `pulse runs cancel` of a watch job: its runs still `running` (the one of p_slot, or
-- each) are recorded cancelled by p_by; Pulse cannot stop a process it does not run. For
-- the web too, in the caller's tenant scope (p_scope), as every statement on jobs is.
CREATE FUNCTION watch_cancel(
    p_tenant text,
    p_name text,
    p_scope text,
    p_slot timestamptz,
    p_by text
) RETURNS TABLE (cancelled_slot timestamptz)
LANGUAGE sql SECURITY DEFINER AS $$
    UPDATE runs r SET
        status = 'cancelled',
        finished_at = now(),
        duration_s = extract(epoch FROM now() - r.started_at)::float8,
        last_error = 'cancelled by ' || p_by
                     || ' (a watched run: Pulse does not stop its process)'
    FROM jobs j
    WHERE j.tenant_id = p_tenant AND j.name = p_name
      AND (p_scope IS NULL OR j.tenant_id = p_scope)
      AND r.job_id = j.id AND r.status = 'running' AND r.origin = 'ping'
      AND (p_slot IS NULL OR r.scheduled_for = p_slot)
    RETURNING r.scheduled_for
$$;

-- Definers' search_path: the schema, then pg_temp (never a caller's temporary table first).
DO $$
BEGIN
    EXECUTE format('ALTER FUNCTION watch_time_out(bigint, timestamptz) '
                   'SET search_path = %I, pg_temp', current_schema());
    EXECUTE format('ALTER FUNCTION watch_end(bytea, timestamptz, text, timestamptz, jsonb, '
                   'text) SET search_path = %I, pg_temp', current_schema());
    EXECUTE format('ALTER FUNCTION watch_cancel(text, text, text, timestamptz, text) '
                   'SET search_path = %I, pg_temp', current_schema());
END $$;

-- An operator's action that moves a watch job past awaited slots already past its
-- late_after_s (no node up since to declare them missed) writes their true record first,
-- as the late pass would: a failed run and a `late` event (migration
-- `0.3.0_pre_zzzzzzzzzz_watch_missed_by_actions`). As the owner, for the web too: slots at
-- or after the job's own (any, for a login that inserts runs itself, which writes after it
-- moved the job) and before its adoption, late by the database's clock (the caller's for
-- such a login), with no record yet; one watch job in the caller's tenant scope.
CREATE FUNCTION watch_declare_missed(
    p_job uuid,
    p_scope text,
    p_slots timestamptz[],
    p_now timestamptz
) RETURNS TABLE (missed_slot timestamptz)
LANGUAGE plpgsql SECURITY DEFINER AS $$
DECLARE
    owner boolean := has_table_privilege(session_user, 'runs', 'INSERT');
    t timestamptz;
    j jobs;
    s timestamptz;
    err text;
BEGIN
    t := CASE WHEN owner THEN coalesce(p_now, now()) ELSE now() END;
    SELECT * INTO j FROM jobs x
    WHERE x.id = p_job AND (p_scope IS NULL OR x.tenant_id = p_scope) AND x.watch
      AND x.status IN ('idle', 'paused');
    IF NOT FOUND THEN
        RETURN;
    END IF;
    err := 'no ping within ' || j.late_after_s || 's of the slot (watch job)';
    FOREACH s IN ARRAY p_slots[1:1000] LOOP
        CONTINUE WHEN (s < j.slot_at AND NOT owner)
                   OR s >= j.adopt_at
                   OR s + make_interval(secs => j.late_after_s) >= t
                   OR EXISTS (SELECT 1 FROM runs r WHERE r.job_id = j.id AND r.scheduled_for = s);
        PERFORM record_run(j.id, j.tenant_id, j.name, s, 1, NULL, NULL, 'failed', NULL, NULL,
                           t, NULL, err, NULL, 'ping');
        PERFORM raise_alert('late', j.id, j.tenant_id, j.name, s, 1, NULL, NULL, NULL, err);
        missed_slot := s;
        RETURN NEXT;
    END LOOP;
END $$;

DO $$
BEGIN
    EXECUTE format('ALTER FUNCTION watch_declare_missed(uuid, text, timestamptz[], timestamptz) '
                   'SET search_path = %I, pg_temp', current_schema());
END $$;


-- == Zones ===============================================================================

-- One shard space per zone set, numbered once and for good. Its shards are
-- 65536 + (space - 1) * 16 .. + 15 (ring/zones.py: ZONE_SHARD_BASE, ZONE_SHARDS).
CREATE TABLE zone_spaces (
    space       int GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    zones       text[] NOT NULL UNIQUE CHECK (cardinality(zones) > 0),
    first_shard int GENERATED ALWAYS AS (65536 + (space - 1) * 16) STORED,
    created_at  timestamptz NOT NULL DEFAULT now()
);


-- == Tenant limits =======================================================================

-- A tenant with a limit has a row in tenant_limits, and its jobs (limited) and flights
-- (limit_tenant) fire the place triggers below; other tenants' rows never do. A run holds
-- a place from when its row turns `running` until it leaves that status or is deleted.
-- A claim takes a place under the limits row's lock (SKIP LOCKED: claims never wait);
-- places given back are journal rows in tenant_moves, written without a lock, so a
-- completion never waits. Places in use: taken + sum(tenant_moves.change)
-- (docs/design/fairness.md).
CREATE TABLE tenant_limits (
    tenant_id      text PRIMARY KEY,
    max_concurrent integer NOT NULL CHECK (max_concurrent >= 1),
    taken          integer NOT NULL DEFAULT 0,
    updated_at     timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE tenant_moves (
    tenant_id text NOT NULL,
    change    integer NOT NULL CHECK (change IN (-1, 1))
);
CREATE INDEX tenant_moves_by_tenant ON tenant_moves (tenant_id);

-- A tenant's free places as a claim's snapshot sees them (no lock): the claim passes over
-- jobs beyond them, so a tenant at its limit never fills a claim meant for others.
CREATE VIEW tenant_room AS
SELECT l.tenant_id,
       l.max_concurrent - l.taken
           - coalesce((SELECT sum(m.change) FROM tenant_moves m
                       WHERE m.tenant_id = l.tenant_id), 0) AS room
FROM tenant_limits l;

-- Setting or clearing a tenant's limit (cluster/store/jobstore/tenant_limits.py) holds this lock
-- exclusively while it marks the tenant's rows; rows being inserted hold it shared, so a
-- job or flight added at that moment is marked too.
CREATE FUNCTION tenant_lock_key(tenant text) RETURNS bigint
LANGUAGE sql IMMUTABLE AS $$
    SELECT (hashtext('pulse.tenant')::bigint << 32) | (hashtext(tenant)::bigint & 4294967295)
$$;

-- One place for `tenant`: false at its limit, or while another claim holds its row.
CREATE FUNCTION tenant_take(tenant text) RETURNS boolean
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
DECLARE
    cap integer;
    used integer;
BEGIN
    SELECT l.max_concurrent, l.taken INTO cap, used
    FROM tenant_limits l WHERE l.tenant_id = tenant
    FOR UPDATE SKIP LOCKED;
    IF NOT FOUND THEN
        -- Held by another claim, or the limit was cleared after the row was marked.
        RETURN NOT EXISTS (SELECT 1 FROM tenant_limits l WHERE l.tenant_id = tenant);
    END IF;
    WITH folded AS (DELETE FROM tenant_moves m WHERE m.tenant_id = tenant RETURNING m.change)
    SELECT used + coalesce(sum(f.change), 0) INTO used FROM folded f;
    IF used < cap THEN
        UPDATE tenant_limits SET taken = used + 1 WHERE tenant_id = tenant;
        RETURN true;
    END IF;
    UPDATE tenant_limits SET taken = used WHERE tenant_id = tenant;
    RETURN false;
END $$;

-- A place given back; the first one a tenant at its limit gets back wakes the claim loops.
CREATE FUNCTION tenant_free(tenant text) RETURNS void
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
BEGIN
    INSERT INTO tenant_moves (tenant_id, change) VALUES (tenant, -1);
    IF EXISTS (SELECT 1 FROM tenant_room r WHERE r.tenant_id = tenant AND r.room = 1) THEN
        PERFORM pg_notify(current_schema() || '_wake', 'tenant');
    END IF;
END $$;

CREATE FUNCTION tenant_mark_job() RETURNS trigger
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
BEGIN
    PERFORM pg_advisory_xact_lock_shared(tenant_lock_key(NEW.tenant_id));
    NEW.limited := EXISTS (SELECT 1 FROM tenant_limits l WHERE l.tenant_id = NEW.tenant_id);
    RETURN NEW;
END $$;

CREATE FUNCTION tenant_mark_flight() RETURNS trigger
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
DECLARE
    tenant text;
BEGIN
    SELECT j.tenant_id INTO tenant FROM jobs j WHERE j.id = NEW.job_id;
    PERFORM pg_advisory_xact_lock_shared(tenant_lock_key(tenant));
    NEW.limit_tenant := (SELECT l.tenant_id FROM tenant_limits l WHERE l.tenant_id = tenant);
    RETURN NEW;
END $$;

-- A flight born running (a slot an `allow` job hands over while its job row gives back
-- the place its claim took). After the insert, not before: a flight that ON CONFLICT DO
-- NOTHING leaves out takes no place.
CREATE FUNCTION tenant_flight_born() RETURNS trigger
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
BEGIN
    INSERT INTO tenant_moves (tenant_id, change) VALUES (NEW.limit_tenant, 1);
    RETURN NULL;
END $$;

-- The place triggers of both tables; TG_ARGV[0] names the row's tenant column (a job's
-- tenant_id, a flight's limit_tenant). Returning NULL refuses the claim's update.
CREATE FUNCTION tenant_status() RETURNS trigger
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
DECLARE
    tenant text := to_jsonb(NEW) ->> TG_ARGV[0];
BEGIN
    IF NEW.status <> 'running' THEN
        PERFORM tenant_free(tenant);
    ELSIF NOT tenant_take(tenant) THEN
        RETURN NULL;
    END IF;
    RETURN NEW;
END $$;

CREATE FUNCTION tenant_deleted() RETURNS trigger
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
BEGIN
    PERFORM tenant_free(to_jsonb(OLD) ->> TG_ARGV[0]);
    RETURN NULL;
END $$;

CREATE TRIGGER tenant_mark BEFORE INSERT ON jobs
FOR EACH ROW EXECUTE FUNCTION tenant_mark_job();
CREATE TRIGGER tenant_mark BEFORE INSERT ON flights
FOR EACH ROW EXECUTE FUNCTION tenant_mark_flight();
CREATE TRIGGER tenant_place_born AFTER INSERT ON flights
FOR EACH ROW WHEN (NEW.limit_tenant IS NOT NULL AND NEW.status = 'running')
EXECUTE FUNCTION tenant_flight_born();
CREATE TRIGGER tenant_place BEFORE UPDATE OF status ON jobs
FOR EACH ROW WHEN (NEW.limited AND (OLD.status = 'running') <> (NEW.status = 'running'))
EXECUTE FUNCTION tenant_status('tenant_id');
CREATE TRIGGER tenant_place BEFORE UPDATE OF status ON flights
FOR EACH ROW
WHEN (NEW.limit_tenant IS NOT NULL AND (OLD.status = 'running') <> (NEW.status = 'running'))
EXECUTE FUNCTION tenant_status('limit_tenant');
CREATE TRIGGER tenant_place_deleted AFTER DELETE ON jobs
FOR EACH ROW WHEN (OLD.limited AND OLD.status = 'running')
EXECUTE FUNCTION tenant_deleted('tenant_id');
CREATE TRIGGER tenant_place_deleted AFTER DELETE ON flights
FOR EACH ROW WHEN (OLD.limit_tenant IS NOT NULL AND OLD.status = 'running')
EXECUTE FUNCTION tenant_deleted('limit_tenant');

-- == Named limits (0.3.0_pre_uses_named_limits, docs/design/limits.md) =========================

-- A key caps the runs that use it at once (max_concurrent) and their starts per period
-- (rate). A run takes every key of its job when its row turns `running` (SKIP LOCKED,
-- all or none, inside the claim's update) and gives them back through limit_moves when it
-- leaves that status. Only rows with keys fire the triggers.
CREATE TABLE limit_keys (
    id             bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    -- '' for a cluster-wide key, else the tenant whose own key it is (only its jobs use it).
    scope          text NOT NULL DEFAULT '',
    name           text NOT NULL CHECK (name <> ''),
    max_concurrent integer CHECK (max_concurrent >= 1),
    rate           integer CHECK (rate >= 1),
    per_s          integer CHECK (per_s >= 1),
    -- Runs holding the key, less the frees of limit_moves not yet folded in.
    taken          integer NOT NULL DEFAULT 0,
    -- The starts of the last period or so (a rate key's tokens out), in order.
    starts         timestamptz[] NOT NULL DEFAULT '{}',
    -- The latest end of a run that gave the key back, as folded in: a run that takes the
    -- key starts no earlier (its recorded start never precedes the end it waited for).
    freed_at       timestamptz,
    updated_at     timestamptz NOT NULL DEFAULT now(),
    UNIQUE (scope, name),
    CHECK (max_concurrent IS NOT NULL OR rate IS NOT NULL),
    CHECK ((rate IS NULL) = (per_s IS NULL))
);

CREATE TABLE limit_moves (
    key_id bigint NOT NULL,
    change integer NOT NULL CHECK (change IN (-1, 1)),
    at     timestamptz  -- a free: when the run ended
);
CREATE INDEX limit_moves_by_key ON limit_moves (key_id);

-- A slot that waited for a key: opened by the claim that passed it over (or a take refused),
-- ended by the take that let it run. `pulse jobs show` reads the open ones, `pulse audit`
-- all of them. A slot waits at most once at a time (limit_waits_one_open: the inserts are
-- ON CONFLICT DO NOTHING); one passed over again after its wait ended (a retry) waits
-- again, in a row of its own (migration `0.3.0_pre_zzzzzzzzzz_waits_kept`).
CREATE TABLE limit_waits (
    job_id   uuid NOT NULL,
    slot     timestamptz NOT NULL,
    key_name text NOT NULL,
    since    timestamptz NOT NULL,
    ended    timestamptz,
    PRIMARY KEY (job_id, slot, since)
);
CREATE INDEX limit_waits_open ON limit_waits (key_name) WHERE ended IS NULL;
CREATE UNIQUE INDEX limit_waits_one_open ON limit_waits (job_id, slot) WHERE ended IS NULL;
-- Pruned with the runs they explain (prune_limit_waits), oldest first.
CREATE INDEX limit_waits_ended ON limit_waits (ended) WHERE ended IS NOT NULL;

-- A key's runs in flight and free places, as a snapshot sees them (no lock).
CREATE VIEW limit_room AS
SELECT l.id, l.scope, l.name,
       l.taken + coalesce((SELECT sum(m.change) FROM limit_moves m WHERE m.key_id = l.id), 0)
           AS running,
       l.max_concurrent - l.taken
           - coalesce((SELECT sum(m.change) FROM limit_moves m WHERE m.key_id = l.id), 0)
           AS room
FROM limit_keys l;

-- The ids of `names` for a job of `tenant` (its own key before a cluster-wide one of that
-- name), in id order; a name without a key is left out.
CREATE FUNCTION limit_resolve(tenant text, names text[]) RETURNS bigint[]
LANGUAGE sql STABLE SET search_path FROM CURRENT AS $$
    SELECT coalesce(array_agg(k.id ORDER BY k.id), '{}')
    FROM unnest(names) AS n(name)
    CROSS JOIN LATERAL (
        SELECT l.id FROM limit_keys l
        WHERE l.name = n.name AND l.scope IN ('', tenant)
        ORDER BY l.scope DESC LIMIT 1
    ) AS k
$$;

-- Starts a rate key counts against one at `at`: those within a period either side (a claim
-- ahead of its slot records a start later than the claims made meanwhile), so no window of
-- one period ever holds more than `rate` starts.
CREATE FUNCTION limit_starts_near(l limit_keys, at timestamptz) RETURNS integer
LANGUAGE sql IMMUTABLE AS $$
    SELECT count(*)::int FROM unnest(l.starts) AS s(t)
    WHERE s.t > at - make_interval(secs => l.per_s) AND s.t < at + make_interval(secs => l.per_s)
$$;

-- The first key of `ids` a run starting at `at` could not take now, as a snapshot sees it
-- (no lock); NULL: all have room. The claims pass such a job or flight over.
CREATE FUNCTION limit_ids_blocked(ids bigint[], at timestamptz) RETURNS text
LANGUAGE sql STABLE SET search_path FROM CURRENT AS $$
    SELECT l.name FROM limit_keys l JOIN limit_room r ON r.id = l.id
    WHERE l.id = ANY(ids)
      AND (r.room <= 0 OR (l.rate IS NOT NULL AND limit_starts_near(l, at) >= l.rate))
    ORDER BY l.id LIMIT 1
$$;

-- The same for the keys `names` of a job of `tenant`; a name without a key blocks.
CREATE FUNCTION limit_blocked(tenant text, names text[], at timestamptz) RETURNS text
LANGUAGE sql STABLE SET search_path FROM CURRENT AS $$
    SELECT coalesce(
        (SELECT n.name FROM unnest(names) AS n(name)
         WHERE NOT EXISTS (SELECT 1 FROM limit_keys l
                           WHERE l.name = n.name AND l.scope IN ('', tenant))
         LIMIT 1),
        limit_ids_blocked(limit_resolve(tenant, names), at))
$$;

-- Every key of `ids` for a run starting at `start_at`, or none: `refused` NULL when taken,
-- else the name of the key that refused; `start_at` moved to the latest end of a run that
-- gave one of them back, if later. The keys are locked with SKIP LOCKED, so a claim never
-- waits for another (no deadlock whatever the order of the keys); a key another claim holds
-- this instant refuses, and the row waits for a later claim. Locked, one statement folds
-- the journal in, checks every key and takes a place (and a token) of each only if all of
-- them have room: all or nothing. A rate key counts the starts within a period either side
-- of this one (a claim ahead of its slot records a start later than claims made meanwhile).
CREATE FUNCTION limit_take(ids bigint[], INOUT start_at timestamptz, OUT refused text)
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
DECLARE
    locked bigint[];
BEGIN
    SELECT coalesce(array_agg(x.id), '{}') INTO locked FROM (
        SELECT l.id FROM limit_keys l WHERE l.id = ANY(ids)
        ORDER BY l.id FOR NO KEY UPDATE SKIP LOCKED
    ) AS x;
    IF cardinality(locked) < cardinality(ids) THEN
        SELECT l.name INTO refused FROM limit_keys l
        WHERE l.id = ANY(ids) AND NOT l.id = ANY(locked) ORDER BY l.id LIMIT 1;
        refused := coalesce(refused, '?');
        RETURN;
    END IF;
    WITH folded AS (
        DELETE FROM limit_moves m WHERE m.key_id = ANY(ids)
        RETURNING m.key_id, m.change, m.at
    ),
    counted AS (
        SELECT l.id, l.name, l.max_concurrent, l.rate, l.per_s, l.starts,
               l.taken + coalesce(f.change, 0) AS taken, greatest(l.freed_at, f.at) AS freed_at
        FROM limit_keys l
        LEFT JOIN (SELECT folded.key_id, sum(folded.change)::int AS change,
                          max(folded.at) AS at
                   FROM folded GROUP BY folded.key_id) AS f ON f.key_id = l.id
        WHERE l.id = ANY(ids)
    ),
    started AS (
        SELECT greatest(start_at, max(c.freed_at)) AS t FROM counted c
    ),
    verdict AS (
        SELECT s.t, (
            SELECT c.name FROM counted c
            WHERE c.taken >= c.max_concurrent
               OR c.rate <= (SELECT count(*) FROM unnest(c.starts) AS x(t)
                             WHERE x.t > s.t - make_interval(secs => c.per_s)
                               AND x.t < s.t + make_interval(secs => c.per_s))
            ORDER BY c.id LIMIT 1) AS refused
        FROM started s
    ),
    written AS (
        UPDATE limit_keys l SET
            taken = c.taken + (v.refused IS NULL)::int,
            freed_at = c.freed_at,
            starts = CASE WHEN v.refused IS NOT NULL OR l.rate IS NULL THEN l.starts ELSE ARRAY(
                SELECT x.t FROM unnest(array_append(l.starts, v.t)) AS x(t)
                WHERE x.t > v.t - 2 * make_interval(secs => l.per_s) ORDER BY x.t) END
        FROM counted c CROSS JOIN verdict v
        WHERE l.id = c.id
    )
    SELECT v.t, v.refused INTO start_at, refused FROM verdict v;
END $$;

-- Keys given back by a run that ended at `ended` (a journal row each, no lock); a key that had
-- no room wakes the claim loops (NOTIFY <schema>_wake, 'limit').
CREATE FUNCTION limit_free(ids bigint[], ended timestamptz) RETURNS void
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
BEGIN
    INSERT INTO limit_moves (key_id, change, at) SELECT k, -1, ended FROM unnest(ids) AS k;
    IF EXISTS (SELECT 1 FROM limit_room r WHERE r.id = ANY(ids) AND r.room = 1) THEN
        PERFORM pg_notify(current_schema() || '_wake', 'limit');
    END IF;
END $$;

-- A job's `uses` names keys it may use: its tenant's own or cluster-wide ones (a key of
-- another tenant is unknown to it). Locked FOR KEY SHARE, so `pulse limits remove` (FOR
-- UPDATE) cannot remove a key while a job naming it is being written.
CREATE FUNCTION uses_check() RETURNS trigger
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
DECLARE
    n text;
BEGIN
    FOREACH n IN ARRAY NEW.uses LOOP
        PERFORM 1 FROM limit_keys l WHERE l.name = n AND l.scope IN ('', NEW.tenant_id)
        FOR KEY SHARE;
        IF NOT FOUND THEN
            RAISE EXCEPTION 'no limit key %', quote_literal(n)
                USING ERRCODE = 'check_violation', CONSTRAINT = 'limit_key', COLUMN = 'uses';
        END IF;
    END LOOP;
    RETURN NEW;
END $$;

-- A run of a job takes its keys (its locked_at, the run's recorded start, moved past the
-- end of the run whose key it took, if need be) or is refused: the claim leaves
-- it due, its wait recorded, and gives back the tenant's place that tenant_place took
-- (that trigger fires first, in name order). Leaving `running` gives the keys back.
CREATE FUNCTION uses_job_status() RETURNS trigger
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
DECLARE
    ids bigint[];
    started timestamptz;
    refused text;
BEGIN
    IF NEW.status <> 'running' THEN
        IF OLD.holds IS NOT NULL THEN
            -- Every statement that ends a run stamps updated_at with its clock.
            PERFORM limit_free(OLD.holds, NEW.updated_at);
        END IF;
        NEW.holds := NULL;
        RETURN NEW;
    END IF;
    ids := limit_resolve(NEW.tenant_id, NEW.uses);
    IF cardinality(ids) < cardinality(NEW.uses) THEN
        refused := limit_blocked(NEW.tenant_id, NEW.uses, NEW.locked_at);
    ELSE
        SELECT t.start_at, t.refused INTO started, refused FROM limit_take(ids, NEW.locked_at) AS t;
        NEW.locked_at := started;
    END IF;
    IF refused IS NOT NULL THEN
        -- Since the claim's clock (its updated_at).
        INSERT INTO limit_waits (job_id, slot, key_name, since)
        VALUES (NEW.id, NEW.slot_at, refused, NEW.updated_at) ON CONFLICT DO NOTHING;
        IF NEW.limited THEN
            PERFORM tenant_free(NEW.tenant_id);
        END IF;
        RETURN NULL;
    END IF;
    NEW.holds := ids;
    UPDATE limit_waits w SET ended = NEW.locked_at
    WHERE w.job_id = NEW.id AND w.slot = NEW.slot_at AND w.ended IS NULL;
    RETURN NEW;
END $$;

-- A flight's keys are its job's, resolved when it is made; one born running (an `allow`
-- job's claim hands its slot over, the job row giving its keys back) holds them at once.
CREATE FUNCTION uses_mark_flight() RETURNS trigger
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
BEGIN
    SELECT CASE WHEN j.uses = '{}' THEN NULL ELSE limit_resolve(j.tenant_id, j.uses) END
    INTO NEW.uses_keys FROM jobs j WHERE j.id = NEW.job_id;
    IF NEW.status = 'running' THEN
        NEW.holds := NEW.uses_keys;
    END IF;
    RETURN NEW;
END $$;

CREATE FUNCTION uses_flight_born() RETURNS trigger
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
BEGIN
    INSERT INTO limit_moves (key_id, change) SELECT k, 1 FROM unnest(NEW.holds) AS k;
    RETURN NULL;
END $$;

-- A flight has no clock column: its end is the statement's, no later than its lease.
CREATE FUNCTION uses_flight_status() RETURNS trigger
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
DECLARE
    started timestamptz;
    refused text;
BEGIN
    IF NEW.status <> 'running' THEN
        IF OLD.holds IS NOT NULL THEN
            PERFORM limit_free(OLD.holds, least(now(), OLD.lease_expires_at));
        END IF;
        NEW.holds := NULL;
        RETURN NEW;
    END IF;
    SELECT t.start_at, t.refused INTO started, refused
    FROM limit_take(NEW.uses_keys, NEW.locked_at) AS t;
    IF refused IS NOT NULL THEN
        -- Since the claim's clock (its locked_at).
        INSERT INTO limit_waits (job_id, slot, key_name, since)
        VALUES (NEW.job_id, NEW.slot, refused, NEW.locked_at) ON CONFLICT DO NOTHING;
        IF NEW.limit_tenant IS NOT NULL THEN
            PERFORM tenant_free(NEW.limit_tenant);
        END IF;
        RETURN NULL;
    END IF;
    NEW.locked_at := started;
    NEW.holds := NEW.uses_keys;
    UPDATE limit_waits w SET ended = NEW.locked_at
    WHERE w.job_id = NEW.job_id AND w.slot = NEW.slot AND w.ended IS NULL;
    RETURN NEW;
END $$;

CREATE FUNCTION uses_deleted() RETURNS trigger
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
BEGIN
    PERFORM limit_free(OLD.holds, least(now(), OLD.lease_expires_at));
    RETURN NULL;
END $$;

-- Named after tenant_place, so they fire after it (BEFORE triggers fire in name order).
CREATE TRIGGER uses_check BEFORE INSERT OR UPDATE OF uses ON jobs
FOR EACH ROW WHEN (NEW.uses <> '{}') EXECUTE FUNCTION uses_check();
CREATE TRIGGER uses_place BEFORE UPDATE OF status ON jobs
FOR EACH ROW WHEN ((NEW.uses <> '{}' OR OLD.holds IS NOT NULL)
                   AND (OLD.status = 'running') <> (NEW.status = 'running'))
EXECUTE FUNCTION uses_job_status();
CREATE TRIGGER uses_place_deleted AFTER DELETE ON jobs
FOR EACH ROW WHEN (OLD.holds IS NOT NULL AND OLD.status = 'running')
EXECUTE FUNCTION uses_deleted();
CREATE TRIGGER uses_mark BEFORE INSERT ON flights
FOR EACH ROW EXECUTE FUNCTION uses_mark_flight();
CREATE TRIGGER uses_place_born AFTER INSERT ON flights
FOR EACH ROW WHEN (NEW.holds IS NOT NULL AND NEW.status = 'running')
EXECUTE FUNCTION uses_flight_born();
CREATE TRIGGER uses_place BEFORE UPDATE OF status ON flights
FOR EACH ROW WHEN ((NEW.uses_keys IS NOT NULL OR OLD.holds IS NOT NULL)
                   AND (OLD.status = 'running') <> (NEW.status = 'running'))
EXECUTE FUNCTION uses_flight_status();
CREATE TRIGGER uses_place_deleted AFTER DELETE ON flights
FOR EACH ROW WHEN (OLD.holds IS NOT NULL AND OLD.status = 'running')
EXECUTE FUNCTION uses_deleted();

-- A slot that stops waiting for its keys but by the take that lets it run (its job paused,
-- moved past it, no longer using the key; a queued flight dropped) ends its wait in the
-- statement that moves it (0.3.0_pre_zzzzzzzzzz_key_waits_end): an open wait is a slot
-- waiting now, which `pulse limits list` lists and pruning keeps.
CREATE FUNCTION limit_wait_left() RETURNS trigger
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
BEGIN
    IF TG_TABLE_NAME = 'jobs' THEN
        -- One wait per (job, slot): a queued flight of the slot may wait in it still.
        UPDATE limit_waits w SET ended = greatest(now(), w.since)
        WHERE w.job_id = OLD.id AND w.slot = OLD.slot_at AND w.ended IS NULL
          AND (NEW.status <> 'idle' OR NEW.slot_at IS DISTINCT FROM OLD.slot_at
               OR NOT w.key_name = ANY(NEW.uses))
          AND NOT EXISTS (SELECT 1 FROM flights f WHERE f.job_id = OLD.id
                          AND f.slot = OLD.slot_at AND f.status = 'queued');
    ELSE
        UPDATE limit_waits w SET ended = greatest(now(), w.since)
        WHERE w.job_id = OLD.job_id AND w.slot = OLD.slot AND w.ended IS NULL
          AND NOT EXISTS (SELECT 1 FROM jobs j WHERE j.id = OLD.job_id
                          AND j.slot_at = OLD.slot AND j.status = 'idle');
    END IF;
    RETURN NULL;
END $$;
CREATE TRIGGER limit_wait_left AFTER UPDATE ON jobs
FOR EACH ROW WHEN (OLD.status = 'idle' AND OLD.uses <> '{}' AND NEW.status <> 'running'
                   AND (NEW.status <> 'idle' OR NEW.slot_at IS DISTINCT FROM OLD.slot_at
                        OR NOT NEW.uses @> OLD.uses))
EXECUTE FUNCTION limit_wait_left();
CREATE TRIGGER limit_wait_left AFTER DELETE ON flights
FOR EACH ROW WHEN (OLD.status = 'queued' AND OLD.uses_keys IS NOT NULL)
EXECUTE FUNCTION limit_wait_left();

-- Their search_path: the schema, then pg_temp (0.3.0_pre_definer_search_path).
DO $$
DECLARE
    f text;
BEGIN
    FOREACH f IN ARRAY ARRAY['limit_resolve(text, text[])',
                             'limit_ids_blocked(bigint[], timestamptz)',
                             'limit_blocked(text, text[], timestamptz)',
                             'limit_take(bigint[], timestamptz)',
                             'limit_free(bigint[], timestamptz)',
                             'uses_check()', 'uses_job_status()', 'uses_mark_flight()',
                             'uses_flight_born()', 'uses_flight_status()', 'uses_deleted()',
                             'limit_wait_left()']
    LOOP
        EXECUTE format('ALTER FUNCTION %s SET search_path = %I, pg_temp', f, current_schema());
    END LOOP;
END $$;



-- == The HTTP API ========================================================================

-- API tokens: only the SHA-256 of the secret is kept; the secret is printed once by
-- `pulse tokens create`. A token scoped to a tenant (tenant_id) reaches only its jobs. A
-- revoked token keeps its row (its name is never given again; its expiry ends too).
CREATE TABLE api_tokens (
    name         text PRIMARY KEY CHECK (name <> ''),
    role         text NOT NULL CHECK (role IN ('admin', 'write', 'read')),
    tenant_id    text,  -- NULL: every tenant
    hash         bytea NOT NULL UNIQUE,
    created_at   timestamptz NOT NULL DEFAULT now(),
    expires_at   timestamptz,  -- NULL: never
    last_used_at timestamptz,
    revoked_at   timestamptz  -- NULL: live
);

-- Every mutation made through the API, written in the transaction of the change itself.
CREATE TABLE api_audit (
    id         bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    at         timestamptz NOT NULL DEFAULT now(),
    token_name text NOT NULL,
    action     text NOT NULL,
    tenant_id  text,
    job_name   text,
    source     text,
    detail     text
);

CREATE INDEX api_audit_at ON api_audit (at DESC, id DESC);

-- Python handlers offered to the API by code: the handler of every job of a Registry loaded
-- by `pulse node --sync-jobs` or `pulse jobs apply --module`, and every function a Registry
-- offers with `Registry.handler`, per tenant of the Registry (cluster/store/jobstore/registered_handlers.py).
CREATE TABLE registered_handlers (
    tenant_id     text NOT NULL,
    handler       text NOT NULL CHECK (handler <> ''),
    registered_by text NOT NULL,
    registered_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_id, handler)
);

CREATE INDEX registered_handlers_by_handler ON registered_handlers (handler);

-- Console sessions: the cookie carries a random id, this table its SHA-256. Revoking the
-- token deletes its sessions; an expired token's sessions stop at lookup.
CREATE TABLE console_sessions (
    id_hash      bytea PRIMARY KEY,
    token_name   text NOT NULL REFERENCES api_tokens (name) ON DELETE CASCADE,
    created_at   timestamptz NOT NULL DEFAULT now(),
    expires_at   timestamptz NOT NULL,
    last_seen_at timestamptz NOT NULL DEFAULT now()
);

CREATE INDEX console_sessions_token ON console_sessions (token_name);
CREATE INDEX console_sessions_expires ON console_sessions (expires_at);

-- == Tenants' quotas =====================================================================

-- Caps on what a tenant may ask for (cluster/store/jobstore/quotas.py): its jobs (each-zone
-- children aside), its backfill slots requested and not yet run, the slots a job or
-- backfill runs at once. No row or a NULL cap: no cap. Triggers check them on every path
-- that writes, each insert queuing on the tenant's quota row so racing writers count each
-- other. The check functions run as the owner (SECURITY DEFINER), their search_path fixed
-- with pg_temp last; so does forget_deleted_jobs_runs (docs/design/roles.md).
CREATE TABLE tenant_quotas (
    tenant_id          text PRIMARY KEY CHECK (tenant_id <> ''),
    max_jobs           integer CHECK (max_jobs >= 0),
    max_backfill_slots integer CHECK (max_backfill_slots >= 0),
    max_parallel       integer CHECK (max_parallel >= 1),
    updated_at         timestamptz NOT NULL DEFAULT now(),
    -- What a job may ask (migration 0.3.0_pre_tenant_caps): the shortest period between
    -- two slots (the writer checks it, through tenant_min_period_s), the output a run
    -- keeps, how long and how many runs a job keeps (quota_check_job).
    min_period_s       integer CHECK (min_period_s >= 1),
    max_output_limit   integer CHECK (max_output_limit >= 0),
    max_keep_for_s     integer CHECK (max_keep_for_s >= 1),
    max_keep_runs      integer CHECK (max_keep_runs >= 1)
);

-- The shortest period a tenant's jobs may have (NULL: no cap), for every writer's role.
CREATE FUNCTION tenant_min_period_s(tenant text) RETURNS integer
LANGUAGE sql STABLE SECURITY DEFINER AS $$
    SELECT q.min_period_s FROM tenant_quotas q WHERE q.tenant_id = tenant
$$;

CREATE FUNCTION quota_check_job() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER AS $$
DECLARE
    q tenant_quotas;
    used bigint;
BEGIN
    -- Only an insert counts, so only an insert queues on the quota row.
    IF TG_OP = 'INSERT' THEN
        SELECT * INTO q FROM tenant_quotas WHERE tenant_id = NEW.tenant_id FOR UPDATE;
    ELSE
        SELECT * INTO q FROM tenant_quotas WHERE tenant_id = NEW.tenant_id;
    END IF;
    IF NOT FOUND THEN
        RETURN NEW;
    END IF;
    IF NEW.overlap = 'allow' AND NEW.max_concurrent > q.max_parallel THEN
        RAISE EXCEPTION 'tenant % may run at most % slots of a job at once (max_parallel), '
            'not %', quote_literal(NEW.tenant_id), q.max_parallel, NEW.max_concurrent
            USING ERRCODE = 'check_violation', CONSTRAINT = 'tenant_quota',
                  COLUMN = 'max_concurrent';
    END IF;
    -- What a job keeps: checked when written, so an update of another column passes.
    IF (TG_OP = 'INSERT' OR NEW.output_limit IS DISTINCT FROM OLD.output_limit)
       AND NEW.output_limit > q.max_output_limit THEN
        RAISE EXCEPTION 'tenant % may keep at most % bytes of a run''s output '
            '(max_output_limit), not %', quote_literal(NEW.tenant_id), q.max_output_limit,
            NEW.output_limit
            USING ERRCODE = 'check_violation', CONSTRAINT = 'tenant_quota',
                  COLUMN = 'output_limit';
    END IF;
    IF (TG_OP = 'INSERT' OR NEW.keep_for_s IS DISTINCT FROM OLD.keep_for_s)
       AND NEW.keep_for_s > q.max_keep_for_s THEN
        RAISE EXCEPTION 'tenant % may keep runs at most %s (max_keep_for_s), not %s',
            quote_literal(NEW.tenant_id), q.max_keep_for_s, NEW.keep_for_s
            USING ERRCODE = 'check_violation', CONSTRAINT = 'tenant_quota',
                  COLUMN = 'keep_for';
    END IF;
    IF (TG_OP = 'INSERT' OR NEW.keep_runs IS DISTINCT FROM OLD.keep_runs)
       AND NEW.keep_runs > q.max_keep_runs THEN
        RAISE EXCEPTION 'tenant % may keep at most % runs of a job (max_keep_runs), not %',
            quote_literal(NEW.tenant_id), q.max_keep_runs, NEW.keep_runs
            USING ERRCODE = 'check_violation', CONSTRAINT = 'tenant_quota',
                  COLUMN = 'keep_runs';
    END IF;
    -- An upsert of a job that exists (ON CONFLICT DO UPDATE) fires this too: no new job.
    IF TG_OP = 'INSERT' AND q.max_jobs IS NOT NULL AND NOT EXISTS (
        SELECT 1 FROM jobs j WHERE j.tenant_id = NEW.tenant_id AND j.name = NEW.name
    ) THEN
        SELECT count(*) INTO used FROM jobs j
        WHERE j.tenant_id = NEW.tenant_id AND j.parent_id IS NULL;
        IF used >= q.max_jobs THEN
            RAISE EXCEPTION 'tenant % has % jobs, its cap (max_jobs %)',
                quote_literal(NEW.tenant_id), used, q.max_jobs
                USING ERRCODE = 'check_violation', CONSTRAINT = 'tenant_quota',
                      COLUMN = 'max_jobs';
        END IF;
    END IF;
    RETURN NEW;
END $$;

CREATE FUNCTION quota_check_backfill() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER AS $$
DECLARE
    q tenant_quotas;
    used bigint;
BEGIN
    SELECT * INTO q FROM tenant_quotas WHERE tenant_id = NEW.tenant_id FOR UPDATE;
    IF NOT FOUND THEN
        RETURN NEW;
    END IF;
    IF NEW.max_parallel > q.max_parallel THEN
        RAISE EXCEPTION 'tenant % may run at most % slots of a backfill at once '
            '(max_parallel), not %', quote_literal(NEW.tenant_id), q.max_parallel,
            NEW.max_parallel
            USING ERRCODE = 'check_violation', CONSTRAINT = 'tenant_quota',
                  COLUMN = 'max_parallel';
    END IF;
    IF q.max_backfill_slots IS NOT NULL THEN
        -- Requested and not yet run: the slots not queued yet, and those in flight.
        SELECT coalesce(sum(greatest(b.slots_total - b.slots_queued, 0)
                            + (SELECT count(*) FROM flights f WHERE f.backfill_id = b.id)), 0)
        INTO used
        FROM backfills b WHERE b.tenant_id = NEW.tenant_id AND b.status = 'active';
        IF used + NEW.slots_total > q.max_backfill_slots THEN
            RAISE EXCEPTION 'tenant % has % backfill slots pending; % more would pass its '
                'cap (max_backfill_slots %)', quote_literal(NEW.tenant_id), used,
                NEW.slots_total, q.max_backfill_slots
                USING ERRCODE = 'check_violation', CONSTRAINT = 'tenant_quota',
                      COLUMN = 'max_backfill_slots';
        END IF;
    END IF;
    RETURN NEW;
END $$;

CREATE TRIGGER tenant_quota BEFORE INSERT ON jobs
FOR EACH ROW WHEN (NEW.parent_id IS NULL) EXECUTE FUNCTION quota_check_job();
CREATE TRIGGER tenant_quota_update BEFORE UPDATE OF overlap, max_concurrent ON jobs
FOR EACH ROW WHEN (NEW.overlap = 'allow' AND NEW.parent_id IS NULL)
EXECUTE FUNCTION quota_check_job();
CREATE TRIGGER tenant_quota_kept BEFORE UPDATE OF output_limit, keep_for_s, keep_runs ON jobs
FOR EACH ROW WHEN (NEW.parent_id IS NULL) EXECUTE FUNCTION quota_check_job();
CREATE TRIGGER tenant_quota BEFORE INSERT ON backfills
FOR EACH ROW EXECUTE FUNCTION quota_check_backfill();

DO $$
BEGIN
    EXECUTE format('ALTER FUNCTION quota_check_job() SET search_path = %I, pg_temp',
                   current_schema());
    EXECUTE format('ALTER FUNCTION quota_check_backfill() SET search_path = %I, pg_temp',
                   current_schema());
    EXECUTE format('ALTER FUNCTION forget_deleted_jobs_runs() SET search_path = %I, pg_temp',
                   current_schema());
END $$;

-- == Dependencies between jobs (docs/design/gates.md) =====================================

-- An edge: `downstream_id` runs a slot only after the slot of `upstream_id` that `match`
-- names succeeded: same, latest, period:day or period:hour (in the downstream's zone).
-- No foreign keys: their triggers would check every update of every job (as for runs,
-- migration 004); a statement trigger drops the edges of deleted jobs instead.
CREATE TABLE job_edges (
    downstream_id uuid NOT NULL,
    upstream_id   uuid NOT NULL,
    match         text NOT NULL CONSTRAINT job_edges_match_check
                  CHECK (match IN ('same', 'latest', 'period:day', 'period:hour', 'chain')),
    PRIMARY KEY (downstream_id, upstream_id),
    CHECK (downstream_id <> upstream_id)
);
CREATE INDEX job_edges_upstream ON job_edges (upstream_id);

CREATE FUNCTION forget_deleted_jobs_edges() RETURNS trigger
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
BEGIN
    DELETE FROM job_edges e USING deleted_jobs d
    WHERE e.downstream_id = d.id OR e.upstream_id = d.id;
    DELETE FROM chain_slots c USING deleted_jobs d WHERE c.job_id = d.id;
    RETURN NULL;
END
$$;

-- After jobs_revision_removed (triggers fire in name order): the `removed` revision still
-- sees the job's edges.
CREATE TRIGGER jobs_unlink_edges AFTER DELETE ON jobs
REFERENCING OLD TABLE AS deleted_jobs
FOR EACH STATEMENT EXECUTE FUNCTION forget_deleted_jobs_edges();
-- The gate pass reads the held jobs of its shards: a probe, not a scan of every job.
CREATE INDEX jobs_gate_wait ON jobs (shard_id) WHERE gate_wait;

-- NULL when every upstream's matching slot succeeded (or failed, under after-failure
-- `run`); 'skip: <why>' when one was skipped, will never run, or failed under `skip`; else
-- 'wait: <why>' (what is true of the slot it waits for). Volatile: it reads the runs and
-- slots as they are now, not as the calling statement began.
CREATE FUNCTION gate_verdict(job uuid, slot timestamptz) RETURNS text
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
DECLARE
    d record;
    e record;
    r record;
    lo timestamptz;
    hi timestamptz;
    unit text;
    flight timestamptz;
    what text;
    waiting text;
BEGIN
    SELECT j.tz, j.after_failure INTO d FROM jobs j WHERE j.id = job;
    FOR e IN SELECT u.id, u.name, u.slot_at, u.status, u.paused, u.attempt, x.match,
                    starts_with(u.schedule, '@after:') AS chained
             FROM job_edges x JOIN jobs u ON u.id = x.upstream_id
             WHERE x.downstream_id = job ORDER BY u.name LOOP
        IF e.match LIKE 'period:%' THEN
            unit := split_part(e.match, ':', 2);
            lo := date_trunc(unit, slot AT TIME ZONE d.tz) AT TIME ZONE d.tz;
            hi := (date_trunc(unit, slot AT TIME ZONE d.tz) + ('1 ' || unit)::interval)
                  AT TIME ZONE d.tz;
        ELSE
            lo := slot;
            IF e.match = 'latest' THEN
                IF e.status <> 'done' AND e.slot_at <= slot THEN
                    lo := e.slot_at;  -- its latest slot at or before ours has not ended yet
                ELSE
                    SELECT max(m.s) INTO lo FROM (
                        SELECT max(x.scheduled_for) FROM runs x
                        WHERE x.job_id = e.id AND x.scheduled_for <= slot
                        UNION ALL
                        SELECT max(f.slot) FROM flights f
                        WHERE f.job_id = e.id AND f.slot <= gate_verdict.slot) AS m (s);
                    IF lo IS NULL THEN  -- it never will: its slots only move forward
                        RETURN format('skip: upstream %s has no slot at or before %s', e.name,
                            to_char(slot AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"'));
                    END IF;
                END IF;
            END IF;
            hi := lo + interval '1 microsecond';
        END IF;
        CONTINUE WHEN EXISTS (
            SELECT 1 FROM runs x
            WHERE x.job_id = e.id AND x.scheduled_for >= lo AND x.scheduled_for < hi
              AND x.status = 'succeeded');
        -- How the slot ended, if it did: a run still going first, then a failure, then a
        -- skip. And whether a flight (a backfill, a rerun, an `allow` slot) may still run it.
        SELECT x.scheduled_for, x.status, x.last_error INTO r FROM runs x
        WHERE x.job_id = e.id AND x.scheduled_for >= lo AND x.scheduled_for < hi
        ORDER BY x.status = 'running' DESC, x.status = 'skipped', x.scheduled_for DESC
        LIMIT 1;
        SELECT min(f.slot) INTO flight FROM flights f
        WHERE f.job_id = e.id AND f.slot >= lo AND f.slot < hi;
        -- Not ended: the upstream has not moved past the slot (a chained one, which has
        -- no clock to move by, until a record says so), or something still runs it.
        IF e.status <> 'done' AND e.slot_at < hi OR e.chained AND r.status IS NULL
           OR flight IS NOT NULL OR r.status = 'running' THEN
            what := CASE
                WHEN e.status = 'running' AND e.slot_at >= lo AND e.slot_at < hi
                    THEN format('upstream %s''s slot %s is running', e.name,
                        to_char(e.slot_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"'))
                WHEN flight IS NOT NULL OR r.status = 'running'
                    THEN format('upstream %s''s slot %s is queued or running', e.name,
                        to_char(coalesce(flight, r.scheduled_for) AT TIME ZONE 'UTC',
                                'YYYY-MM-DD"T"HH24:MI:SS"Z"'))
                WHEN e.attempt > 1 AND e.slot_at >= lo AND e.slot_at < hi
                    THEN format('upstream %s''s slot %s failed an attempt and waits for '
                        'its retry', e.name,
                        to_char(e.slot_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"'))
                WHEN e.match LIKE 'period:%'
                    THEN format('upstream %s has not succeeded in the %s from %s yet', e.name,
                        unit, to_char(lo AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"'))
                ELSE format('upstream %s''s slot %s has not run yet', e.name,
                        to_char(lo AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"'))
            END || CASE WHEN e.paused AND e.status <> 'running'
                        THEN format(' (%s is paused)', e.name) ELSE '' END;
            waiting := coalesce(waiting, what);
            CONTINUE;
        END IF;
        IF r.status IS NULL THEN  -- it moved past without a record: nothing will come
            RETURN 'skip: ' || CASE WHEN e.match LIKE 'period:%'
                THEN format('upstream %s had no slot in the %s from %s', e.name, unit,
                            to_char(lo AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"'))
                ELSE format('upstream %s''s slot %s never ran (%s moved past it)', e.name,
                            to_char(lo AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"'),
                            e.name) END;
        END IF;
        what := format('upstream %s''s slot %s', e.name,
                       to_char(r.scheduled_for AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"'));
        IF r.status = 'skipped' THEN  -- nothing ran upstream, so nothing follows
            RETURN 'skip: ' || what || ' was skipped' || coalesce(': ' || r.last_error, '');
        END IF;
        what := what || CASE r.status WHEN 'failed' THEN ' failed'
                                      WHEN 'timed_out' THEN ' timed out'
                                      WHEN 'cancelled' THEN ' was cancelled'
                                      ELSE ' was lost' END;
        IF d.after_failure = 'skip' THEN
            RETURN 'skip: ' || what;
        ELSIF d.after_failure = 'block' THEN
            waiting := coalesce(waiting, what);
        END IF;
    END LOOP;
    RETURN 'wait: ' || waiting;  -- NULL when nothing waits
END $$;

-- A gated job's slot set by any statement: held out of the due range while it waits.
CREATE FUNCTION gate_hold() RETURNS trigger
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
DECLARE
    pulled timestamptz;
BEGIN
    -- A chained job done with its slot asks for the next one released (9998-01-01,
    -- records.CHAINED_NEXT): the oldest not taken yet, due from now (updated_at).
    IF NEW.next_run_at = '9998-01-01Z'::timestamptz THEN
        UPDATE chain_slots c SET taken = true
        WHERE c.job_id = NEW.id AND c.slot = (
            SELECT min(x.slot) FROM chain_slots x WHERE x.job_id = NEW.id AND NOT x.taken)
        RETURNING c.slot INTO pulled;
        IF pulled IS NULL THEN  -- nothing released: it waits for its upstreams' next success
            NEW.next_run_at := '9999-01-01Z'::timestamptz;
            NEW.gate_wait := false;
            RETURN NEW;
        END IF;
        NEW.slot_at := pulled;
        NEW.attempt := 1;
        NEW.next_run_at := greatest(pulled, NEW.updated_at);
    END IF;
    -- Held at most its after-timeout, a day without one: then due, to be recorded skipped
    -- with what it waited for.
    IF gate_verdict(NEW.id, NEW.slot_at) LIKE 'wait: %' THEN
        NEW.gate_wait := true;
        NEW.next_run_at := greatest(NEW.next_run_at, NEW.slot_at
            + make_interval(secs => coalesce(NEW.after_timeout_s, 86400)));
    ELSE
        -- Opened by a statement that only asked again (an apply's gate settings) rather
        -- than releasing it at a time (gate_release): due at its slot, not at its bound.
        IF TG_OP = 'UPDATE' AND NEW.gate_wait AND NEW.next_run_at = OLD.next_run_at THEN
            NEW.next_run_at := NEW.slot_at;
        END IF;
        NEW.gate_wait := false;
    END IF;
    RETURN NEW;
END $$;

CREATE TRIGGER jobs_gate_hold BEFORE INSERT OR UPDATE OF next_run_at ON jobs
FOR EACH ROW WHEN (NEW.gated AND NEW.status = 'idle' AND NEW.next_run_at < '9999-01-01Z')
EXECUTE FUNCTION gate_hold();

-- Releases the held downstreams of `upstream` whose gate now opens (its completion, or the
-- gate pass when `upstream` is NULL: every held job of `shards`). Only those are locked, so
-- a pass never holds a row a completion is releasing; a row locked this instant is left to
-- the gate pass, so a completion never waits for a claim. A released slot is due from
-- `at`: its lateness (the late pass, `late` alerts) counts from its release, not from a
-- slot it could not start before. Wakes the released shards.
CREATE FUNCTION gate_release(upstream uuid, shards integer[] DEFAULT NULL,
                             at timestamptz DEFAULT now()) RETURNS integer
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
DECLARE
    released integer := 0;
    s integer;
BEGIN
    FOR s IN
        WITH held AS (
            SELECT d.id FROM jobs d
            WHERE d.gate_wait AND d.status = 'idle'
              AND (upstream IS NULL OR d.id IN (
                  SELECT e.downstream_id FROM job_edges e WHERE e.upstream_id = upstream))
              AND (shards IS NULL OR d.shard_id = ANY(shards))
              AND coalesce(gate_verdict(d.id, d.slot_at) NOT LIKE 'wait: %', true)
            FOR UPDATE OF d SKIP LOCKED
        )
        UPDATE jobs j SET next_run_at = greatest(j.slot_at, at), updated_at = at
        FROM held h WHERE j.id = h.id
        RETURNING CASE WHEN NOT j.gate_wait THEN j.shard_id END
    LOOP
        IF s IS NOT NULL THEN
            released := released + 1;
            PERFORM pg_notify(current_schema() || '_wake', s::text);
        END IF;
    END LOOP;
    RETURN released;
END $$;


-- == Revisions ==========================================================================

-- Every change to a job's definition, written by triggers in the transaction that makes
-- it (migration 029, docs/design/revisions.md).
-- change: created, updated, removed. definition: the job's definition after the change
-- (before it, for `removed`), diff: {field: [before, after]} of the fields that changed.
-- A literal password in a handler's URL is masked in both; ${env:NAME} stays as written.
CREATE TABLE job_revisions (
    tenant_id   text NOT NULL,
    job_name    text NOT NULL,
    revision    integer NOT NULL CHECK (revision >= 1),
    job_id      uuid NOT NULL,
    change      text NOT NULL CHECK (change IN ('created', 'updated', 'removed')),
    at          timestamptz NOT NULL DEFAULT now(),
    who         text NOT NULL,
    how         text NOT NULL,
    definition  jsonb NOT NULL,
    diff        jsonb NOT NULL,
    -- The transaction that wrote it: later statements of the same transaction (an apply
    -- moving the job to its zones' shard) fold their change into it.
    xact        xid8 NOT NULL DEFAULT pg_current_xact_id(),
    PRIMARY KEY (tenant_id, job_name, revision)
);

-- Retention finds the names whose last revision removed the job (docs/retention.md).
CREATE INDEX job_revisions_removed ON job_revisions (at) WHERE change = 'removed';

-- A handler as it is shown (Python's masking.shown holds the same rules, and a test checks
-- both agree): a password in a URL, a secret header or key of a JSON handler, a shell
-- command's `Authorization: ...`, `--password ...` and `PGPASSWORD=...` are `***`, unless
-- the value is a reference (`${env:NAME}`, `$NAME`). Revisions record it; the search reads it.
CREATE FUNCTION job_handler_shown(handler text) RETURNS text
LANGUAGE plpgsql IMMUTABLE AS $$
DECLARE
    word constant text := '(?:password|passwd|secret|token|api[-_]?key|access[-_]?key'
        '|private[-_]?key|auth|cookie|credential|session|signature|dsn)';
    scheme constant text := '(?:(?:bearer|basic|token|digest)\s+)';
BEGIN
    -- Each rule below needs a URL's `://` or one of the words: a handler with neither is
    -- shown as it is, without five scans of it.
    IF strpos(handler, '://') = 0 AND handler !~* word THEN
        RETURN handler;
    END IF;
    handler := regexp_replace(handler,
        $re$(://[^/@:"\s]*):(?!\$\{env:[A-Za-z_][A-Za-z0-9_]*\}@)[^@/"\s]+@$re$, '\1:***@', 'g');
    handler := regexp_replace(handler,
        $re$("[A-Za-z0-9_-]*$re$ || word || $re$[A-Za-z0-9_-]*"\s*:\s*")$re$
        || $re$(?![^"]*\$\{env:)(?:[^"\\]|\\.)*"$re$, '\1***"', 'gi');
    handler := regexp_replace(handler,
        $re$(^|[^A-Za-z0-9_-])([A-Za-z0-9_-]*$re$ || word || $re$[A-Za-z0-9_-]*\s*:\s*$re$
        || scheme || $re$?)(?!\$|$re$ || scheme || $re$)[^\s"',;}@]+$re$, '\1\2***', 'gi');
    handler := regexp_replace(handler,
        $re$(^|\s)(--?[A-Za-z0-9_-]*$re$ || word || $re$)(=|\s+)$re$
        || $re$(?!["']?\$)("[^"]*"|'[^']*'|[^\s"']+)$re$, '\1\2\3***', 'gi');
    RETURN regexp_replace(handler,
        $re$(^|[^A-Za-z0-9_])([A-Za-z0-9_]*$re$ || word || $re$[A-Za-z0-9_]*\s*=\s*)$re$
        || $re$(?!["']?\$)("[^"]*"|'[^']*'|[^\s"'&;]+)$re$, '\1\2***', 'gi');
END $$;

-- The definition a revision records: the options of a job file, each under its name (the
-- column of `retries` is max_retries), as the row holds them, the time a pause --until
-- holds it to, and the job's upstreams (names, sorted) with their match rule.
CREATE FUNCTION job_definition(j jobs) RETURNS jsonb
LANGUAGE sql STABLE SET search_path FROM CURRENT AS $$
    SELECT jsonb_build_object(
        'schedule', j.schedule, 'tz', j.tz, 'dst_repeated', j.dst_repeated,
        'dst_skipped', j.dst_skipped,
        'handler', job_handler_shown(j.handler),
        'payload', j.payload, 'paused', j.paused, 'paused_until', j.paused_until,
        'catch_up', j.catch_up,
        'grace_s', j.grace_s, 'max_backfill', j.max_backfill, 'timeout_s', j.timeout_s,
        'retries', j.max_retries, 'retry_backoff_s', j.retry_backoff_s,
        'keep_for_s', j.keep_for_s, 'keep_runs', j.keep_runs, 'output_limit', j.output_limit,
        'late_after_s', j.late_after_s, 'pause_after_failures', j.pause_after_failures,
        'overlap', j.overlap, 'max_concurrent', j.max_concurrent,
        'cancel_grace_s', j.cancel_grace_s, 'jitter_s', j.jitter_s,
        'remove_when_done', j.remove_when_done, 'calendar', j.calendar,
        'on_excluded', j.on_excluded, 'business_day', j.business_day, 'zones', j.zones,
        'each_zone', j.each_zone, 'after_timeout_s', j.after_timeout_s,
        'after_failure', j.after_failure, 'max_runs', j.max_runs, 'labels', j.labels,
        'expect_max_s', j.expect_max_s, 'expect_min_s', j.expect_min_s,
        'deadline', j.deadline, 'expect_baseline', j.expect_baseline, 'asserts', j.asserts,
        'assert_fails', j.assert_fails, 'watch', j.watch, 'adopt_at', j.adopt_at,
        'payload_schema', j.payload_schema, 'description', j.description)
    -- A call takes at most 100 arguments: the options added since 0.3.0 go in this one.
    || jsonb_build_object('priority', j.priority, 'each_node', j.each_node, 'uses', j.uses)
    || (SELECT jsonb_build_object(
                   'after', coalesce(jsonb_agg(u.name ORDER BY u.name), '[]'::jsonb),
                   'after_match', min(e.match))
        FROM job_edges e JOIN jobs u ON u.id = e.upstream_id
        WHERE e.downstream_id = j.id)
$$;

-- {field: [before, after]} for each field of two definitions that differs.
CREATE FUNCTION job_definition_diff(before jsonb, after jsonb) RETURNS jsonb
LANGUAGE sql IMMUTABLE AS $$
    SELECT coalesce(jsonb_object_agg(k, jsonb_build_array(before -> k, after -> k)), '{}')
    FROM jsonb_object_keys(coalesce(after, before)) AS k
    WHERE (before -> k) IS DISTINCT FROM (after -> k)
$$;

CREATE FUNCTION job_revision_who() RETURNS text
LANGUAGE sql STABLE AS $$
    SELECT coalesce(nullif(current_setting('pulse.who', true), ''),
                    nullif(current_setting('application_name'), ''), session_user)
$$;

CREATE FUNCTION job_revision_how() RETURNS text
LANGUAGE sql STABLE AS $$
    SELECT coalesce(nullif(current_setting('pulse.how', true), ''), 'sql')
$$;

-- A new job's number follows the last of its name. Set before the insert (an upsert's
-- insert that meets a conflict becomes an update and writes no `created` row).
CREATE FUNCTION job_revision_number() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path FROM CURRENT AS $$
BEGIN
    NEW.revision := coalesce((SELECT max(r.revision) FROM job_revisions r
                              WHERE r.tenant_id = NEW.tenant_id AND r.job_name = NEW.name),
                             0) + 1;
    RETURN NEW;
END
$$;

-- SECURITY DEFINER: the roles that change jobs write revisions only through these.
CREATE FUNCTION job_revision_created() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path FROM CURRENT AS $$
BEGIN
    -- OFFSET 0 keeps the definition a value computed once per row, not an expression
    -- the diff would compute again.
    INSERT INTO job_revisions (tenant_id, job_name, revision, job_id, change, who, how,
                               definition, diff)
    SELECT n.tenant_id, n.name, n.revision, n.id, 'created', job_revision_who(),
           job_revision_how(), d.definition, job_definition_diff(NULL, d.definition)
    FROM created_jobs n CROSS JOIN LATERAL (SELECT job_definition(n) AS definition OFFSET 0) d
    WHERE n.parent_id IS NULL;
    RETURN NULL;
END
$$;

CREATE FUNCTION job_revision_updated() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path FROM CURRENT AS $$
DECLARE
    before jsonb := job_definition(OLD);
    after jsonb := job_definition(NEW);
BEGIN
    -- Both triggers below fire for a statement that pauses and changes more: one row.
    IF before = after OR NEW.revision <> OLD.revision THEN
        RETURN NEW;
    END IF;
    -- A revision this transaction wrote already takes the change in: one per apply.
    UPDATE job_revisions r SET
        definition = after,
        diff = job_definition_diff(
            CASE WHEN r.change = 'created' THEN NULL
                 ELSE r.definition || (SELECT coalesce(jsonb_object_agg(k, r.diff -> k -> 0), '{}')
                                       FROM jsonb_object_keys(r.diff) AS k) END,
            after)
    WHERE r.tenant_id = NEW.tenant_id AND r.job_name = NEW.name AND r.revision = OLD.revision
      AND r.xact = pg_current_xact_id();
    IF FOUND THEN
        RETURN NEW;
    END IF;
    NEW.revision := OLD.revision + 1;
    INSERT INTO job_revisions (tenant_id, job_name, revision, job_id, change, who, how,
                               definition, diff)
    VALUES (NEW.tenant_id, NEW.name, NEW.revision, NEW.id, 'updated', job_revision_who(),
            job_revision_how(), after, job_definition_diff(before, after));
    RETURN NEW;
END
$$;

CREATE FUNCTION job_revision_removed() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path FROM CURRENT AS $$
BEGIN
    INSERT INTO job_revisions (tenant_id, job_name, revision, job_id, change, who, how,
                               definition, diff)
    SELECT o.tenant_id, o.name, o.revision + 1, o.id, 'removed', job_revision_who(),
           job_revision_how(), d.definition, job_definition_diff(d.definition, NULL)
    FROM removed_jobs o CROSS JOIN LATERAL (SELECT job_definition(o) AS definition OFFSET 0) d
    WHERE o.parent_id IS NULL;
    RETURN NULL;
END
$$;

-- Called by an apply that changed a job's edges, after writing them (`before`: the job's
-- definition before): folds the change into the revision this transaction wrote, or writes
-- a new one. Edges are not columns of jobs, so the update triggers cannot see them.
CREATE FUNCTION job_revision_edges(job uuid, before jsonb) RETURNS integer
LANGUAGE plpgsql SECURITY DEFINER SET search_path FROM CURRENT AS $$
DECLARE
    j jobs;
    after jsonb;
BEGIN
    SELECT * INTO j FROM jobs x WHERE x.id = job;
    IF NOT FOUND OR j.parent_id IS NOT NULL THEN
        RETURN NULL;
    END IF;
    after := job_definition(j);
    IF after = before THEN
        RETURN j.revision;
    END IF;
    UPDATE job_revisions r SET
        definition = after,
        diff = job_definition_diff(
            CASE WHEN r.change = 'created' THEN NULL
                 ELSE r.definition || (SELECT coalesce(jsonb_object_agg(k, r.diff -> k -> 0), '{}')
                                       FROM jsonb_object_keys(r.diff) AS k) END,
            after)
    WHERE r.tenant_id = j.tenant_id AND r.job_name = j.name AND r.revision = j.revision
      AND r.xact = pg_current_xact_id();
    IF FOUND THEN
        RETURN j.revision;
    END IF;
    INSERT INTO job_revisions (tenant_id, job_name, revision, job_id, change, who, how,
                               definition, diff)
    VALUES (j.tenant_id, j.name, j.revision + 1, j.id, 'updated', job_revision_who(),
            job_revision_how(), after, job_definition_diff(before, after));
    UPDATE jobs x SET revision = j.revision + 1 WHERE x.id = job;
    RETURN j.revision + 1;
END
$$;

CREATE TRIGGER jobs_revision_number BEFORE INSERT ON jobs
FOR EACH ROW WHEN (NEW.parent_id IS NULL) EXECUTE FUNCTION job_revision_number();
CREATE TRIGGER jobs_revision_created AFTER INSERT ON jobs
REFERENCING NEW TABLE AS created_jobs
FOR EACH STATEMENT EXECUTE FUNCTION job_revision_created();
-- Only statements that set a field of the definition, and only rows whose fields changed.
-- The claim sets none of them: never considered. A completion sets `paused` alone among
-- them (auto-pause), so `paused` (and `paused_until`, of pause --until) has a trigger of
-- its own, whose WHEN compares those columns only.
CREATE TRIGGER jobs_revision_paused BEFORE UPDATE OF paused, paused_until ON jobs
FOR EACH ROW WHEN (NEW.parent_id IS NULL AND (OLD.paused, OLD.paused_until)
                   IS DISTINCT FROM (NEW.paused, NEW.paused_until))
EXECUTE FUNCTION job_revision_updated();
CREATE TRIGGER jobs_revision_updated BEFORE UPDATE OF
    schedule, tz, dst_repeated, dst_skipped, handler, payload, catch_up, grace_s,
    max_backfill, timeout_s, max_retries, retry_backoff_s, keep_for_s, keep_runs,
    output_limit, late_after_s, pause_after_failures, overlap, max_concurrent,
    cancel_grace_s, jitter_s, remove_when_done, calendar, on_excluded, business_day, zones,
    each_zone, after_timeout_s, after_failure, max_runs, labels, expect_max_s, expect_min_s,
    deadline, expect_baseline, asserts, assert_fails, watch, adopt_at, payload_schema,
    description, priority, each_node, uses ON jobs
FOR EACH ROW WHEN (NEW.parent_id IS NULL AND (
    OLD.schedule, OLD.tz, OLD.dst_repeated, OLD.dst_skipped, OLD.handler, OLD.payload,
    OLD.catch_up, OLD.grace_s, OLD.max_backfill, OLD.timeout_s, OLD.max_retries,
    OLD.retry_backoff_s, OLD.keep_for_s, OLD.keep_runs, OLD.output_limit, OLD.late_after_s,
    OLD.pause_after_failures, OLD.overlap, OLD.max_concurrent, OLD.cancel_grace_s,
    OLD.jitter_s, OLD.remove_when_done, OLD.calendar, OLD.on_excluded, OLD.business_day,
    OLD.zones, OLD.each_zone, OLD.after_timeout_s, OLD.after_failure, OLD.max_runs,
    OLD.labels, OLD.expect_max_s, OLD.expect_min_s, OLD.deadline, OLD.expect_baseline,
    OLD.asserts, OLD.assert_fails, OLD.watch, OLD.adopt_at, OLD.payload_schema,
    OLD.description, OLD.priority, OLD.each_node, OLD.uses)
    IS DISTINCT FROM (
    NEW.schedule, NEW.tz, NEW.dst_repeated, NEW.dst_skipped, NEW.handler, NEW.payload,
    NEW.catch_up, NEW.grace_s, NEW.max_backfill, NEW.timeout_s, NEW.max_retries,
    NEW.retry_backoff_s, NEW.keep_for_s, NEW.keep_runs, NEW.output_limit, NEW.late_after_s,
    NEW.pause_after_failures, NEW.overlap, NEW.max_concurrent, NEW.cancel_grace_s,
    NEW.jitter_s, NEW.remove_when_done, NEW.calendar, NEW.on_excluded, NEW.business_day,
    NEW.zones, NEW.each_zone, NEW.after_timeout_s, NEW.after_failure, NEW.max_runs,
    NEW.labels, NEW.expect_max_s, NEW.expect_min_s, NEW.deadline, NEW.expect_baseline,
    NEW.asserts, NEW.assert_fails, NEW.watch, NEW.adopt_at, NEW.payload_schema,
    NEW.description, NEW.priority, NEW.each_node, NEW.uses))
EXECUTE FUNCTION job_revision_updated();
CREATE TRIGGER jobs_revision_removed AFTER DELETE ON jobs
REFERENCING OLD TABLE AS removed_jobs
FOR EACH STATEMENT EXECUTE FUNCTION job_revision_removed();
-- A chained job's slots (migration 023, docs/design/chains.md): each success of an upstream
-- slot of a `chain` edge writes (downstream, slot) here, in the statement of that upstream's
-- fenced completion; the downstream takes them oldest first (gate_hold). A row is written
-- once and never again (taken stays), so a second upstream of a fan-in, or a completion
-- replayed, makes no second slot.
CREATE TABLE chain_slots (
    job_id     uuid NOT NULL,
    slot       timestamptz NOT NULL,
    taken      boolean NOT NULL DEFAULT false,
    created_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (job_id, slot)
);
CREATE INDEX chain_slots_pending ON chain_slots (job_id) WHERE NOT taken;
-- Taken slots by age, for the pruning pass (migration `0.3.0_pre_chain_slots_taken`).
CREATE INDEX chain_slots_taken ON chain_slots (created_at) WHERE taken;

-- Called by the fenced completion of a successful slot of `upstream` that feeds chained
-- jobs: records the slot for each (but one that is done: migration
-- `0.3.0_pre_zzzzzzzzzz_no_releases_when_done`), and has those idle with nothing to do take
-- it at once (rows locked this instant are left to the gate pass, chain_pull). Wakes their
-- shards.
CREATE FUNCTION chain_release(upstream uuid, slot timestamptz,
                              at timestamptz DEFAULT now()) RETURNS integer
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
DECLARE
    started integer := 0;
    s integer;
BEGIN
    INSERT INTO chain_slots (job_id, slot, created_at)
    SELECT e.downstream_id, slot, at FROM job_edges e JOIN jobs d ON d.id = e.downstream_id
    WHERE e.upstream_id = upstream AND e.match = 'chain' AND d.status <> 'done'
    ON CONFLICT DO NOTHING;
    IF NOT FOUND THEN
        RETURN 0;
    END IF;
    FOR s IN
        WITH waiting AS (
            SELECT d.id FROM jobs d
            WHERE d.id IN (SELECT e.downstream_id FROM job_edges e
                           WHERE e.upstream_id = upstream AND e.match = 'chain')
              AND d.status = 'idle' AND NOT d.gate_wait
              AND d.next_run_at = '9999-01-01Z'::timestamptz
            FOR UPDATE OF d SKIP LOCKED
        )
        UPDATE jobs j SET next_run_at = '9998-01-01Z'::timestamptz, updated_at = at
        FROM waiting w WHERE j.id = w.id
        RETURNING CASE WHEN j.next_run_at < '9999-01-01Z'::timestamptz THEN j.shard_id END
    LOOP
        IF s IS NOT NULL THEN
            started := started + 1;
            PERFORM pg_notify(current_schema() || '_wake', s::text);
        END IF;
    END LOOP;
    RETURN started;
END $$;

-- A chained job that becomes done (its max_runs reached) takes the slots still released to
-- it: owed nothing, as any done job's, and pruned with the taken ones; a job given more
-- runs again waits for its upstream's next success (migration
-- `0.3.0_pre_zzzzzzzzzz_no_releases_when_done`).
CREATE FUNCTION chain_done() RETURNS trigger
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
BEGIN
    UPDATE chain_slots c SET taken = true WHERE c.job_id = NEW.id AND NOT c.taken;
    RETURN NULL;
END $$;

CREATE TRIGGER jobs_chain_done AFTER UPDATE OF status ON jobs
FOR EACH ROW WHEN (NEW.status = 'done' AND OLD.status <> 'done'
                   AND starts_with(NEW.schedule, '@after:'))
EXECUTE FUNCTION chain_done();

-- The gate pass's part for chains: the chained jobs of `shards` idle with a slot released
-- but not taken (their row was locked at the release) take it.
CREATE FUNCTION chain_pull(shards integer[], at timestamptz DEFAULT now()) RETURNS integer
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
DECLARE
    started integer := 0;
    s integer;
BEGIN
    FOR s IN
        WITH waiting AS (
            SELECT d.id FROM jobs d
            WHERE d.id IN (SELECT c.job_id FROM chain_slots c WHERE NOT c.taken)
              AND d.shard_id = ANY(shards) AND d.status = 'idle' AND NOT d.gate_wait
              AND d.next_run_at = '9999-01-01Z'::timestamptz
            FOR UPDATE OF d SKIP LOCKED
        )
        UPDATE jobs j SET next_run_at = '9998-01-01Z'::timestamptz, updated_at = at
        FROM waiting w WHERE j.id = w.id
        RETURNING CASE WHEN j.next_run_at < '9999-01-01Z'::timestamptz THEN j.shard_id END
    LOOP
        IF s IS NOT NULL THEN
            started := started + 1;
            PERFORM pg_notify(current_schema() || '_wake', s::text);
        END IF;
    END LOOP;
    RETURN started;
END $$;

-- == Functions' search_path ===============================================================

-- Every function that fixes its search_path, or runs as the owner, searches the schema
-- then pg_temp: a caller's temporary table never stands in for one of the schema
-- (docs/design/roles.md).
DO $$
DECLARE
    f regprocedure;
BEGIN
    FOR f IN
        SELECT p.oid::regprocedure FROM pg_proc p
        WHERE p.pronamespace = current_schema()::regnamespace
          AND (p.prosecdef OR EXISTS (SELECT 1 FROM unnest(p.proconfig) AS c
                                      WHERE c LIKE 'search_path=%'))
    LOOP
        EXECUTE format('ALTER FUNCTION %s SET search_path = %I, pg_temp', f, current_schema());
    END LOOP;
END $$;
