"""Alerts without I/O of the database: rules and the events they deliver, and the webhook
request every sender makes."""
