-- Pulse schema, 0.3.0: who may run a job over the HTTP API.
--
-- Additive: a column nodes of the previous release neither read nor write (their upsert
-- and claim name their columns), so they keep running. A job written outside the API is
-- triggered, rerun or fed a payload over the API only when it opts in (api_run); a job
-- the API wrote always could, so the jobs whose newest revision the API wrote keep that.
-- Revisions do not record the column, so the revision trigger is left as it is.

ALTER TABLE jobs ADD COLUMN api_run boolean NOT NULL DEFAULT false;

UPDATE jobs j SET api_run = true
WHERE (SELECT r.how FROM job_revisions r
       WHERE r.tenant_id = j.tenant_id AND r.job_name = j.name
       ORDER BY r.revision DESC LIMIT 1) = 'api';

UPDATE jobs c SET api_run = true FROM jobs p WHERE c.parent_id = p.id AND p.api_run;
