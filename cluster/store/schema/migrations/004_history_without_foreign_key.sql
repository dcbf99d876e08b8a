-- Pulse schema, version 4. Runs with search_path set to the cluster's schema.
--
-- Every completion writes a run row, and the foreign key from runs to jobs checked each
-- one: a trigger per row running a query that locks the job row the same statement had
-- just updated. Every statement that writes run rows takes them from job rows it updates
-- in the same statement, so a run row never names a job that is gone; the key only
-- deleted a job's history with it. A statement trigger on jobs does that now: it runs
-- after the job rows are deleted (any completion in flight on them has committed or will
-- find them gone), and its DELETE takes a fresh snapshot, so it sees the run rows
-- committed meanwhile.
-- Additive: nodes of the previous version run against it unchanged.

ALTER TABLE runs DROP CONSTRAINT runs_job_id_fkey;

CREATE FUNCTION forget_deleted_jobs_runs() RETURNS trigger
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
BEGIN
    DELETE FROM runs r USING deleted_jobs d WHERE r.job_id = d.id;
    RETURN NULL;
END
$$;

CREATE TRIGGER jobs_forget_runs AFTER DELETE ON jobs
REFERENCING OLD TABLE AS deleted_jobs
FOR EACH STATEMENT EXECUTE FUNCTION forget_deleted_jobs_runs();
