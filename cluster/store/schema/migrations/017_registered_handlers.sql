-- Pulse schema, version 17: Python handlers offered to the HTTP API by code
-- (docs/design/api-handlers.md). Nodes that load registries (`pulse node --sync-jobs`) and
-- `pulse jobs apply --module` record the handler of every registered job and every
-- function a Registry offers with `Registry.handler`, per tenant of the Registry; the API
-- accepts a Python handler it finds here (or that `api.handlers` names exactly) and
-- imports nothing. Additive: nodes of earlier versions never read this table.
CREATE TABLE registered_handlers (
    tenant_id     text NOT NULL,
    handler       text NOT NULL CHECK (handler <> ''),
    registered_by text NOT NULL,
    registered_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_id, handler)
);

CREATE INDEX registered_handlers_by_handler ON registered_handlers (handler);
