-- Pulse schema, version 23: job labels and blackout windows by label (docs/design/labels.md).
--
-- labels: a job's key=value labels as a JSON object of strings (`--label`). A window of
-- scope `label` covers the jobs whose label `label_key` is `label_value`, in one tenant
-- (tenant_id) or in every tenant (tenant_id NULL). Additive; the check on jobs is added NOT
-- VALID to spare a scan under lock (every existing row has the default, an empty object).

ALTER TABLE jobs ADD COLUMN labels jsonb NOT NULL DEFAULT '{}'::jsonb;
ALTER TABLE jobs ADD CONSTRAINT jobs_labels_check CHECK (jsonb_typeof(labels) = 'object')
    NOT VALID;

ALTER TABLE windows ADD COLUMN label_key text;
ALTER TABLE windows ADD COLUMN label_value text;
ALTER TABLE windows DROP CONSTRAINT windows_window_scope_check;
ALTER TABLE windows DROP CONSTRAINT windows_check1;
ALTER TABLE windows DROP CONSTRAINT windows_check2;
ALTER TABLE windows ADD CONSTRAINT windows_window_scope_check
    CHECK (window_scope IN ('job', 'tenant', 'cluster', 'label'));
ALTER TABLE windows ADD CONSTRAINT windows_tenant_check
    CHECK (CASE window_scope WHEN 'cluster' THEN tenant_id IS NULL
                             WHEN 'label' THEN true
                             ELSE tenant_id IS NOT NULL END);
ALTER TABLE windows ADD CONSTRAINT windows_job_check
    CHECK ((window_scope = 'job') = (job_name IS NOT NULL));
ALTER TABLE windows ADD CONSTRAINT windows_label_check
    CHECK ((window_scope = 'label') = (label_key IS NOT NULL AND label_value IS NOT NULL));
