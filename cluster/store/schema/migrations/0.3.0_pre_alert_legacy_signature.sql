-- Pulse schema, 0.3.0: the body-only signature is sent only for rules that ask for it.
--
-- X-Pulse-Signature signs the body alone, so a captured request replays as valid for ever;
-- the Standard Webhooks signature (webhook-signature) covers the id and the send time too.
-- A rule sends the old one only with legacy_signature, off for every rule, those made
-- before included. Additive: nodes of the previous release read no new column and keep
-- sending both until they leave.
ALTER TABLE alert_rules ADD COLUMN legacy_signature boolean NOT NULL DEFAULT false;
