"""Running a handler: the context it receives and the outcome it produces, Python and
shell runners, the threads sync handlers run on, output capture, ``ctx.transaction()``,
and the handlers that hand a run on (``http:``, ``celery:``)."""
