-- Pulse schema, 0.3.0: a run row keeps the states a later write replaced.
--
-- A run row is written when an attempt ends and rewritten by the slot's next attempt
-- (record_run's upsert), a watch run's end or timeout, a cancel. Before this, a rewrite left
-- no trace, so nothing could tell a retry, a re-run after a node's death and a final record
-- overwritten apart. The trigger appends the replaced state to the row's history (a JSON
-- list, oldest first) for `pulse audit`. It fires on rewrites only
-- and writes no other row: a slot's first record, nearly every write, pays nothing, and the
-- history goes with its row. Additive: nodes of the previous release write runs by their
-- columns and read them by name, and the trigger keeps their rewrites too.

ALTER TABLE runs ADD COLUMN history jsonb;

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
