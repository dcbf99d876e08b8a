"""Real files the importers are tested on (tests/integration/test_importers.py): a crontab,
a Celery app module with a beat schedule, and Kubernetes CronJob manifests."""
