-- Pulse schema, 0.3.0: a retry passed over for its key waits again.
--
-- A slot passed over for a named limit is recorded waiting once (limit_waits, one row per
-- job and slot, written ON CONFLICT DO NOTHING by the claims and the take triggers), and
-- the take that lets it run ends the wait. A slot that waited, ran and failed, and whose
-- retry was then passed over for its key, found its row ended: the retry waited without a
-- record, so `pulse limits list`, `pulse jobs show` and the audit read it as not waiting.
-- An insert for a slot whose wait has ended opens that wait again, from the new pass
-- (limit_wait_again); the audit reports the last wait of the slot.
--
-- Additive: a node of the previous release inserts as before, and the trigger reopens.

CREATE FUNCTION limit_wait_again() RETURNS trigger
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
BEGIN
    UPDATE limit_waits w SET since = NEW.since, key_name = NEW.key_name, ended = NULL
    WHERE w.job_id = NEW.job_id AND w.slot = NEW.slot AND w.ended IS NOT NULL;
    RETURN NEW;  -- the row exists now if it did before: the insert does nothing
END $$;

CREATE TRIGGER limit_wait_again BEFORE INSERT ON limit_waits
FOR EACH ROW EXECUTE FUNCTION limit_wait_again();

DO $$
BEGIN
    EXECUTE format('ALTER FUNCTION limit_wait_again() SET search_path = %I, pg_temp',
                   current_schema());
END $$;
