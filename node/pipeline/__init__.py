"""The hot path of a slot: claim, execute, complete, renew, with the pacing and the
database clock they share, the outcome policy, and the NOTIFY listener that wakes the
claim loop."""
