-- Pulse schema, 0.3.0: a wait for a named limit ends when its slot stops waiting.
--
-- A slot passed over for a key is recorded waiting (limit_waits), and the take that lets it
-- run ended the wait. A slot that stopped waiting any other way (its job paused, moved past
-- it by skip-next, pause --until or a new timing, or no longer using the key; a queued
-- flight dropped with its backfill) left its wait open: `pulse limits list` listed the slot
-- among the key's waiters for ever, and pruning, which keeps the open waits of living jobs,
-- never took it. Now the statement that moves the job on, or drops the flight, ends the
-- wait; `pulse audit` reports on the slot's record how long it waited.
--
-- Additive: nodes of the previous release take keys as before.

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

DO $$
BEGIN
    EXECUTE format('ALTER FUNCTION limit_wait_left() SET search_path = %I, pg_temp',
                   current_schema());
END $$;
