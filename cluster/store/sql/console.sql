-- Console sessions (cluster/store/access/console_sessions.py, docs/design/web.md): a row per signed-in
-- browser, found by the SHA-256 of the id its cookie carries. A session lives while its
-- token does, until its absolute expiry, and while it is seen at least every %(idle_s)s.

-- name: console_session_insert
-- Sessions that can no longer be used are swept here, so the table stays small without
-- a pruner.
WITH swept AS (
    DELETE FROM console_sessions
    WHERE expires_at <= coalesce(%(now)s::timestamptz, now())
       OR last_seen_at <= coalesce(%(now)s::timestamptz, now())
                          - make_interval(secs => %(idle_s)s)
)
INSERT INTO console_sessions (id_hash, token_name, created_at, expires_at, last_seen_at)
SELECT %(hash)s, name, coalesce(%(now)s::timestamptz, now()),
       coalesce(%(now)s::timestamptz, now()) + make_interval(secs => %(max_age_s)s),
       coalesce(%(now)s::timestamptz, now())
FROM api_tokens
WHERE name = %(token_name)s AND revoked_at IS NULL
  AND (expires_at IS NULL OR expires_at > coalesce(%(now)s::timestamptz, now()))
RETURNING token_name, expires_at;

-- name: console_session_authenticate
-- The token of a live session; its last sight is stamped at most once a minute, so a
-- page that polls does not write at every request.
WITH s AS (
    SELECT c.id_hash, c.last_seen_at, t.name, t.role, t.tenant_id
    FROM console_sessions c JOIN api_tokens t ON t.name = c.token_name
    WHERE c.id_hash = %(hash)s
      AND c.expires_at > coalesce(%(now)s::timestamptz, now())
      AND c.last_seen_at > coalesce(%(now)s::timestamptz, now())
                           - make_interval(secs => %(idle_s)s)
      AND (t.expires_at IS NULL OR t.expires_at > coalesce(%(now)s::timestamptz, now()))
      AND t.revoked_at IS NULL
), touched AS (
    UPDATE console_sessions c SET last_seen_at = coalesce(%(now)s::timestamptz, now())
    FROM s
    WHERE c.id_hash = s.id_hash
      AND s.last_seen_at < coalesce(%(now)s::timestamptz, now()) - interval '1 minute'
)
SELECT name, role, tenant_id FROM s;

-- name: console_session_delete
DELETE FROM console_sessions WHERE id_hash = %(hash)s RETURNING token_name;

