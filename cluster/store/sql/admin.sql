-- What operators set up: the cluster's settings (`pulse config`, cluster/store/config.py),
-- API tokens and the audit trail (cluster/store/access/tokens.py, docs/design/web.md). A
-- tenant-scoped token's reads and writes carry %(scope)s, so the tenant scope is enforced
-- by the statement itself.

-- name: config_rows
SELECT key, value, updated_at FROM config ORDER BY key;

-- name: set_config
INSERT INTO config (key, value, updated_at) VALUES (%(key)s, %(value)s, now())
ON CONFLICT (key) DO UPDATE SET value = excluded.value, updated_at = excluded.updated_at
RETURNING key, value, updated_at;

-- name: seed_config
-- The defaults of keys not set yet; an operator's values stay.
INSERT INTO config (key, value)
SELECT k, v FROM unnest(%(keys)s::text[], %(values)s::text[]) AS c(k, v)
ON CONFLICT (key) DO NOTHING;

-- name: token_insert
INSERT INTO api_tokens (name, role, tenant_id, hash, expires_at)
VALUES (%(name)s, %(role)s, %(tenant_id)s, %(hash)s,
        coalesce(%(expires_at)s::timestamptz,
                 coalesce(%(now)s::timestamptz, now()) + make_interval(secs => %(expires_s)s)))
ON CONFLICT (name) DO NOTHING
RETURNING name, role, tenant_id, created_at, expires_at, last_used_at;

-- name: token_list
SELECT name, role, tenant_id, created_at, expires_at, last_used_at, revoked_at
FROM api_tokens ORDER BY name;

-- name: token_revoke
-- The row stays, so the name is never given again; its expiry ends too (webs of the
-- previous release know no revoked_at). Its console sessions go.
WITH ended AS (
    DELETE FROM console_sessions WHERE token_name = %(name)s
)
UPDATE api_tokens SET revoked_at = now(), expires_at = least(expires_at, now())
WHERE name = %(name)s AND revoked_at IS NULL
RETURNING name;

-- name: token_reissue
-- `pulse up`'s own token, given a new secret at each start (its sessions end).
WITH ended AS (
    DELETE FROM console_sessions WHERE token_name = %(name)s
)
INSERT INTO api_tokens (name, role, tenant_id, hash)
VALUES (%(name)s, %(role)s, NULL, %(hash)s)
ON CONFLICT (name) DO UPDATE SET
    role = excluded.role, tenant_id = NULL, hash = excluded.hash, created_at = now(),
    expires_at = NULL, last_used_at = NULL, revoked_at = NULL
RETURNING name, role, tenant_id, created_at, expires_at, last_used_at, revoked_at;

-- name: token_authenticate
-- The live token with this hash; its last use is stamped at most once a minute.
WITH t AS (
    SELECT name, role, tenant_id, last_used_at FROM api_tokens
    WHERE hash = %(hash)s AND (expires_at IS NULL OR expires_at > now())
      AND revoked_at IS NULL
), touched AS (
    UPDATE api_tokens a SET last_used_at = now()
    FROM t
    WHERE a.name = t.name
      AND (t.last_used_at IS NULL OR t.last_used_at < now() - interval '1 minute')
)
SELECT name, role, tenant_id FROM t;

-- name: audit_insert
INSERT INTO api_audit (token_name, action, tenant_id, job_name, source, detail)
VALUES (%(token_name)s, %(action)s, %(tenant_id)s, %(job_name)s, %(source)s, %(detail)s);

-- name: audit_list
SELECT id, at, token_name, action, tenant_id, job_name, source, detail
FROM api_audit
WHERE (%(scope)s::text IS NULL OR tenant_id = %(scope)s)
  AND (%(before)s::bigint IS NULL OR id < %(before)s)
ORDER BY id DESC
LIMIT %(limit)s;
