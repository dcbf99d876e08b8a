"""``JobStore``: Pulse's admin API over one connection (the CLI, ``pulse web``, the Python
API), and its parts: definitions and their checks, plans, revisions, holds, inputs, run
control, gates, calendars, windows and each job's time rule, tenants' limits and quotas,
registered handlers, paged reads and timelines, and the pool ``pulse web`` borrows from.
Every statement carries the store's tenant scope (``scoped``)."""
