-- Pulse schema, 0.3.0: every-node jobs (`--each-node`).
--
-- A slot of an each-node job runs once on every live member (of its zones). The node that
-- claims the slot fans it out (the `spawn` statement): one row per member in `node_runs`,
-- claimable by that member alone, and the slot's roll-up in `node_slots`. A member's run
-- that ends, or that is recorded missed (its node died, drained, never took it), takes its
-- place in the roll-up through node_run_ended; the last one closes the slot: its run row
-- says which members ran it and which missed it, and why. Additive: nodes of the previous
-- release claim an each-node job as an ordinary one (one run per slot) until upgraded.
-- Named to apply after `0.3.0_pre_shown_handlers`, `0.3.0_pre_until_revisions` and
-- `0.3.0_pre_within_tenant_priority`: it re-creates their job_definition (migrations of a
-- release apply by name).

ALTER TABLE jobs ADD COLUMN each_node boolean NOT NULL DEFAULT false;

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
-- The roll-up's row lock orders concurrent ends: each sees the others'.
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
           count(*) FILTER (WHERE v ->> 'status' = 'succeeded')
    INTO ran, ok FROM jsonb_each(s.ended) AS e(k, v);
    outcome := CASE WHEN ok > 0 AND ok = ran THEN 'succeeded' ELSE 'failed' END;
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
    IF ran < cardinality(s.members) THEN  -- a member missed it
        PERFORM raise_alert('incomplete', j.id, j.tenant_id, j.name, s.slot, 1, e_node_id,
                            e_zone, NULL, coverage);
    END IF;
    DELETE FROM node_slots WHERE job_id = e_job_id AND slot = e_slot;
    RETURN coverage;
END $$;

-- A slot closed with a member that missed it raises `incomplete`.
ALTER TABLE alert_events DROP CONSTRAINT alert_events_event_check;
ALTER TABLE alert_events ADD CONSTRAINT alert_events_event_check
    CHECK (event IN ('failed', 'recovered', 'lost', 'late', 'skipped', 'paused', 'slow',
                     'overdue', 'too_fast', 'assertion_failed', 'double_run', 'incomplete'));

DO $$
BEGIN
    EXECUTE format('ALTER FUNCTION node_run_ended(uuid, timestamptz, text, text, text, text, '
                   'text, timestamptz) SET search_path = %I, pg_temp', current_schema());
END $$;

-- Revisions record each_node: the definition and the trigger
-- that watches its fields gain it, last. Nothing else changes.
CREATE OR REPLACE FUNCTION job_definition(j jobs) RETURNS jsonb
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
    || jsonb_build_object('priority', j.priority, 'each_node', j.each_node)
    || (SELECT jsonb_build_object(
                   'after', coalesce(jsonb_agg(u.name ORDER BY u.name), '[]'::jsonb),
                   'after_match', min(e.match))
        FROM job_edges e JOIN jobs u ON u.id = e.upstream_id
        WHERE e.downstream_id = j.id)
$$;

DO $$
BEGIN
    EXECUTE format('ALTER FUNCTION job_definition(jobs) SET search_path = %I, pg_temp',
                   current_schema());
END $$;

DROP TRIGGER jobs_revision_updated ON jobs;
CREATE TRIGGER jobs_revision_updated BEFORE UPDATE OF
    schedule, tz, dst_repeated, dst_skipped, handler, payload, catch_up, grace_s,
    max_backfill, timeout_s, max_retries, retry_backoff_s, keep_for_s, keep_runs,
    output_limit, late_after_s, pause_after_failures, overlap, max_concurrent,
    cancel_grace_s, jitter_s, remove_when_done, calendar, on_excluded, business_day, zones,
    each_zone, after_timeout_s, after_failure, max_runs, labels, expect_max_s, expect_min_s,
    deadline, expect_baseline, asserts, assert_fails, watch, adopt_at, payload_schema,
    description, priority, each_node ON jobs
FOR EACH ROW WHEN (NEW.parent_id IS NULL AND (
    OLD.schedule, OLD.tz, OLD.dst_repeated, OLD.dst_skipped, OLD.handler, OLD.payload,
    OLD.catch_up, OLD.grace_s, OLD.max_backfill, OLD.timeout_s, OLD.max_retries,
    OLD.retry_backoff_s, OLD.keep_for_s, OLD.keep_runs, OLD.output_limit, OLD.late_after_s,
    OLD.pause_after_failures, OLD.overlap, OLD.max_concurrent, OLD.cancel_grace_s,
    OLD.jitter_s, OLD.remove_when_done, OLD.calendar, OLD.on_excluded, OLD.business_day,
    OLD.zones, OLD.each_zone, OLD.after_timeout_s, OLD.after_failure, OLD.max_runs,
    OLD.labels, OLD.expect_max_s, OLD.expect_min_s, OLD.deadline, OLD.expect_baseline,
    OLD.asserts, OLD.assert_fails, OLD.watch, OLD.adopt_at, OLD.payload_schema,
    OLD.description, OLD.priority, OLD.each_node)
    IS DISTINCT FROM (
    NEW.schedule, NEW.tz, NEW.dst_repeated, NEW.dst_skipped, NEW.handler, NEW.payload,
    NEW.catch_up, NEW.grace_s, NEW.max_backfill, NEW.timeout_s, NEW.max_retries,
    NEW.retry_backoff_s, NEW.keep_for_s, NEW.keep_runs, NEW.output_limit, NEW.late_after_s,
    NEW.pause_after_failures, NEW.overlap, NEW.max_concurrent, NEW.cancel_grace_s,
    NEW.jitter_s, NEW.remove_when_done, NEW.calendar, NEW.on_excluded, NEW.business_day,
    NEW.zones, NEW.each_zone, NEW.after_timeout_s, NEW.after_failure, NEW.max_runs,
    NEW.labels, NEW.expect_max_s, NEW.expect_min_s, NEW.deadline, NEW.expect_baseline,
    NEW.asserts, NEW.assert_fails, NEW.watch, NEW.adopt_at, NEW.payload_schema,
    NEW.description, NEW.priority, NEW.each_node))
EXECUTE FUNCTION job_revision_updated();
