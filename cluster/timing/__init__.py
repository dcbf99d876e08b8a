"""Time as Pulse reckons it, pure and without I/O: schedules, cron expressions, catch-up of
missed slots, start jitter, and human-readable durations."""
