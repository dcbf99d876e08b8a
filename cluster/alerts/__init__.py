"""Alerts without I/O of the database: rules and the events they deliver, and what every
sender sends for each format (a webhook request, a PagerDuty event, an email)."""
