"""Housekeeping off the claim path: recovery of dead owners' slots, pruning, the late
pass, alert outbox delivery, backfill queuing, and ``--sync-jobs`` at start."""
