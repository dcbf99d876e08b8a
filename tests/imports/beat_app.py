"""A Celery app as projects write it, with a beat schedule of every kind Pulse maps and of
the kinds it refuses (``pulse import celery-beat tests.imports.beat_app``)."""

from __future__ import annotations

from datetime import timedelta

from celery import Celery
from celery.schedules import crontab, schedule, solar

app = Celery("billing", broker="redis://127.0.0.1:6379/15")
app.conf.timezone = "Europe/Berlin"
app.conf.beat_schedule = {
    "nightly-invoices": {
        "task": "billing.tasks.invoices",
        "schedule": crontab(minute=30, hour=2),
        "kwargs": {"region": "eu", "dry_run": False},
        "options": {"queue": "billing"},
    },
    "office-hours-sync": {
        "task": "billing.tasks.sync",
        "schedule": crontab(minute="*/15", hour="9-17", day_of_week="mon-fri"),
    },
    "heartbeat": {"task": "billing.tasks.heartbeat", "schedule": 30.0},
    "hourly-rollup": {
        "task": "billing.tasks.rollup",
        "schedule": timedelta(hours=1),
        "options": {"expires": 600},
    },
    "every-5-minutes": {"task": "billing.tasks.poll", "schedule": schedule(timedelta(minutes=5))},
    "at-sunrise": {
        "task": "billing.tasks.lights",
        "schedule": solar("sunrise", 52.52, 13.40),
    },
    "first-monday": {
        "task": "billing.tasks.report",
        "schedule": crontab(minute=0, hour=8, day_of_month="1-7", day_of_week="mon"),
    },
    "with-args": {"task": "billing.tasks.add", "schedule": 60, "args": (2, 2)},
}
