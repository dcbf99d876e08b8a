"""A Celery config module (``app.config_from_object("tests.imports.beat_config")``): the
beat schedule at its top level, no app."""

from celery.schedules import crontab

timezone = "Asia/Tokyo"
beat_schedule = {
    "morning-digest": {"task": "mail.tasks.digest", "schedule": crontab(minute=0, hour=7)},
}
