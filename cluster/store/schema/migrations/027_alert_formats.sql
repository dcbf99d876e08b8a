-- Pulse schema, version 27: alert rules of format `pagerduty` (Events API v2) and `email`
-- (SMTP from the `smtp.*` config keys), beside json and slack (docs/alerts.md).
--
-- An email rule keeps its recipients in `url` as `mailto:a@example.com,b@example.com`; a
-- pagerduty rule its Events API URL, and in `secret_env` the NAME of the nodes' variable
-- holding the routing key. Additive: a node of the previous release never writes these
-- formats; one that leases such a delivery fails its attempt (a mailto: URL is not http, a
-- json body is refused by PagerDuty) and it is retried, by a node of this release.

ALTER TABLE alert_rules DROP CONSTRAINT alert_rules_format_check;
ALTER TABLE alert_rules ADD CONSTRAINT alert_rules_format_check
    CHECK (format IN ('json', 'slack', 'pagerduty', 'email'));
