"""A module without a registry: ``apply --module`` refuses it."""

from __future__ import annotations

JOBS: list[str] = []
