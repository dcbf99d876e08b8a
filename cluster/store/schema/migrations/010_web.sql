-- Pulse schema, version 10: what the HTTP API and the console need (cluster/web/). Additive:
-- nodes of earlier versions never read these tables.

-- API tokens: only the SHA-256 of the secret is kept; the secret is printed once by
-- `pulse tokens create`. A token scoped to a tenant (tenant_id) reaches only its jobs.
CREATE TABLE api_tokens (
    name       text PRIMARY KEY CHECK (name <> ''),
    role       text NOT NULL CHECK (role IN ('admin', 'write', 'read')),
    tenant_id  text,  -- NULL: every tenant
    hash       bytea NOT NULL UNIQUE,
    created_at timestamptz NOT NULL DEFAULT now(),
    expires_at timestamptz,  -- NULL: never
    last_used_at timestamptz
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
