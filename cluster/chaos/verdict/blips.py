"""The ``blips move no shard`` check (pure): a ``pg-blip`` cuts one node's Postgres
connections for less than the shard keeper's grace, so the other nodes must tell it from a
death and leave its shards alone (docs/design/recovery.md).

For every blip, a shard the node held at the last lock sample before the cut and holds
again once things settled (the first sample from the settle time after the cut ended) must
not have been held by any other node in between: that would be a shard that moved away and
back because the blip was taken for a death. It may be unheld meanwhile: the node's locks
went with its session, and it takes them again when it is back. A shard that ends with
another node moved for another reason (a node that restarted after an earlier fault taking
its own shards back), not because of the blip.
"""

from __future__ import annotations

from cluster.chaos.plan import SETTLE_S
from cluster.chaos.verdict.observations import FaultRecord, LockSample, Observations
from cluster.chaos.verdict.safety import Violation


def _held_before(samples: list[LockSample], fault: FaultRecord) -> dict[int, str]:
    before = [s for s in samples if s.at < fault.started and s.holders is not None]
    return dict(before[-1].holders or {}) if before else {}


def _held_after(samples: list[LockSample], fault: FaultRecord) -> dict[int, str]:
    after = [s for s in samples if s.at >= fault.ended + SETTLE_S and s.holders is not None]
    return dict(after[0].holders or {}) if after else {}


def _moved(obs: Observations, fault: FaultRecord) -> list[Violation]:
    samples = sorted(obs.samples, key=lambda s: s.at)
    node = fault.targets[0]
    before, after = _held_before(samples, fault), _held_after(samples, fault)
    mine = {shard for shard, holder in before.items() if holder == node == after.get(shard)}
    found: dict[int, Violation] = {}
    for sample in samples:
        if not fault.started <= sample.at <= fault.ended + SETTLE_S or sample.holders is None:
            continue
        for shard in mine:
            holder = sample.holders.get(shard)
            if holder not in (None, node) and shard not in found:
                at = sample.at - fault.started
                detail = f"shard {shard} of {node} held by {holder} {at:.1f}s after the blip began"
                found[shard] = Violation("shard moved in a blip", f"shard {shard}", None, detail)
    return list(found.values())


def blips_move_no_shard(obs: Observations) -> tuple[str, list[Violation]] | None:
    """(summary, violations) over every ``pg-blip`` of the run; None without one."""
    blips = [f for f in obs.faults if f.kind == "pg-blip"]
    if not blips:
        return None
    found = [v for fault in blips for v in _moved(obs, fault)]
    return f"{len(blips)} blips, {len(found)} shards moved", found
