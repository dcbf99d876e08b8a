"""One Pulse scheduler node: membership, shard locks, claiming, execution, recovery, drain.

The invariants every part of this package keeps:

- S1 one claim per slot: a slot is claimed by one committed statement at a time; a retry of
  the same slot is a new attempt on the same run row.
- S2 fenced writes: every write after a claim carries the lease token it was claimed with;
  a write that matches nothing is stale, is not applied, and is counted and logged.
- S3 no overlap: a job whose slot is running is not claimed until that run ends or is
  recovered.
- S4 no early fire: due-ness is judged by the database clock in the claim statement.
- L1 no silent loss: every slot that came due is run or recorded as skipped, per policy.
- L2 bounded failover: a dead node's shards are re-locked and its runs recovered within
  seconds, not after a lease; a frozen node's lock session is ended by Postgres
  (``idle_session_timeout``) and its late writes are fenced.
- L3 coverage: while one node is healthy, no shard stays unheld past the failover bound.
- B1 backpressure: a node claims at most as many jobs as it has free execution slots.

Authority runs Redis (desired shards) < Postgres advisory locks (held shards) < the lease
token on the job row (who runs the slot). A node trusts its locks only while its lock
session has answered within ``session_timeout - margin``.
"""
