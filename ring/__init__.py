"""Pure placement logic for Pulse: which shard a job lives in, which member
should own each shard, and what a node must release or acquire to get there.

No I/O, and no imports from ``cluster`` or ``node``: every node runs this same
code over the same inputs and must reach the same answers on its own.
"""

from ring.hashring import VNODES, Ring
from ring.rebalance import ShardDiff, diff, moved
from ring.shards import MAX_SHARD_COUNT, MIN_SHARD_COUNT, shard_for, validate_shard_count

__all__ = [
    "MAX_SHARD_COUNT",
    "MIN_SHARD_COUNT",
    "VNODES",
    "Ring",
    "ShardDiff",
    "diff",
    "moved",
    "shard_for",
    "validate_shard_count",
]
