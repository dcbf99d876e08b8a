-- Python handlers offered to the HTTP API by code (cluster/store/jobstore/registered_handlers.py): recorded by
-- nodes that load registries and by `pulse jobs apply --module`, read by the API.

-- name: handlers_register
INSERT INTO registered_handlers (tenant_id, handler, registered_by)
SELECT t, h, %(by)s FROM unnest(%(tenants)s::text[], %(handlers)s::text[]) AS r(t, h)
ON CONFLICT (tenant_id, handler) DO UPDATE
SET registered_by = excluded.registered_by, registered_at = now();

-- name: handlers_registered
-- The handlers a token of tenant %(scope)s may use (NULL: any registered one).
SELECT DISTINCT handler FROM registered_handlers
WHERE %(scope)s::text IS NULL OR tenant_id = %(scope)s
ORDER BY handler;

-- name: handlers_list
SELECT tenant_id, handler, registered_by, registered_at FROM registered_handlers
ORDER BY tenant_id, handler;

-- name: handlers_remove
DELETE FROM registered_handlers
WHERE handler = %(handler)s AND (%(tenant_id)s::text IS NULL OR tenant_id = %(tenant_id)s);
