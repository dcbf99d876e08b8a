"""Work a node does beside its claims, on side connections of its own: pruning runs past
their retention, queuing backfilled slots, alert deliveries and the late pass, and watch
jobs' pings and adoption. ``JobStore`` uses the same modules for the admin's side of each."""
