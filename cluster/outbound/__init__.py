"""Requests that leave Pulse for addresses users chose (``http:`` handlers, alert
webhooks): the HTTP client behind the egress guard (``transport``)."""
