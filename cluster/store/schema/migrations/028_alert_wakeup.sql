-- Pulse schema, version 28: a queued alert delivery wakes the nodes (docs/design/alerts.md).
--
-- raise_alert NOTIFYs `alerts` on the wake-up channel when it queued a delivery, so every
-- node's alert delivery runs at once instead of polling the outbox every second: an idle
-- node asks only every few seconds (node/maintenance/outbox.py). Nothing is sent when no
-- rule wants the event. Additive: nodes of the previous release ignore the payload and
-- poll as before.

CREATE OR REPLACE FUNCTION raise_alert(
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
