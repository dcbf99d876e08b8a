-- Pulse schema, 0.3.0: a revoked API token stays, as revoked.
--
-- Revoking deleted the row, so its name could be given to a new token and the audit
-- trail's rows named two tokens at once. Now revoking sets revoked_at (and ends expires_at,
-- which webs of the previous release check), the name stays taken, and the row says when.
-- Additive: webs of the previous release refuse a revoked token as expired.
ALTER TABLE api_tokens ADD COLUMN revoked_at timestamptz;
