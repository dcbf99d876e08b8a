"""Pulse's worked example: the jobs of a multi-tenant API gateway (see jobs.yaml)."""
