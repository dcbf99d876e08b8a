"""Importers: crontabs, Celery beat schedules and Kubernetes CronJobs turned into Pulse job
files (``pulse import``), with every entry that cannot be mapped listed, never dropped."""
