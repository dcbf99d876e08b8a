"""The ``poison-job`` fault: a job whose handler ends the process of whatever node runs it.

The job is created paused with the workload; each fault resumes it, triggers one slot and
pauses it again once that slot is recorded (a paused job would not run a lost attempt
again). Each attempt kills its node; the harness restarts it after ``RESTART_DELAY_S``, as
a supervisor would. Pulse must record the slot failed
after at most ``RETRIES`` + 1 attempts (a lost attempt counts against the retries) while
every other job keeps its guarantees (docs/chaos.md).
"""

from __future__ import annotations

from cluster.jobs.spec import JobSpec

JOB = "chaos-poison"
RETRIES = 1
EXIT_CODE = 86  # the poison handler's os._exit code: a node that exits so was poisoned
RESTART_DELAY_S = 1.0
# How long one poison slot may take: every attempt needs a failover to be taken back.
DEADLINE_S = 60.0
HOLD_S = 12.0  # what the plan budgets for it


def spec() -> JobSpec:
    return JobSpec.build(
        JOB,
        "@yearly",  # never due by itself during a run: only triggered
        "cluster.chaos.witness:record",
        payload={"crash": EXIT_CODE},
        retries=RETRIES,
        paused=True,
    )
