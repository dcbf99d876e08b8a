-- Pulse schema, version 18: console sessions (cluster/store/sessions.py). Additive: nodes
-- never read this table, so nodes of earlier versions run beside it unchanged.
--
-- Signing in to the console with a token makes a row here; the cookie carries the
-- session's random id, the row only its SHA-256. A session ends when it is signed out,
-- idle too long, past its absolute expiry, or when its token is revoked (the cascade
-- deletes it in the revoking statement) or expires (the lookup joins the token).
CREATE TABLE console_sessions (
    id_hash      bytea PRIMARY KEY,
    token_name   text NOT NULL REFERENCES api_tokens (name) ON DELETE CASCADE,
    created_at   timestamptz NOT NULL DEFAULT now(),
    expires_at   timestamptz NOT NULL,
    last_seen_at timestamptz NOT NULL DEFAULT now()
);

CREATE INDEX console_sessions_token ON console_sessions (token_name);
CREATE INDEX console_sessions_expires ON console_sessions (expires_at);
