"""The cluster's run-time policies kept in the ``config`` table: every key and its check,
the API's handler allow-list, and run retention."""
