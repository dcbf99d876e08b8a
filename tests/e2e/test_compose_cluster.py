"""The compose cluster, really run: `bin/compose` makes the images (stand-ins built from
Debian's archive when no registry answers) and starts Postgres, Redis, init, three nodes in
three zones and the web under a project name of its own, on free loopback ports.

From the host, through the published ports: every node joins and every shard is held, the
example jobs fire, the API and the console answer. The nodes start on the image of the
parent commit and are upgraded one by one to this tree's; then one node is killed, one
frozen (`docker pause`), one cut off (`docker network disconnect`), and each time the others
take its shards and it rejoins once back. A job ticking every second with backfill (and
retries, so an attempt lost with its node runs again) runs every slot of all that exactly
once: each slot's run succeeded (the runs table) and `pulse audit` finds none missing or
overwritten. The monitoring profile's Prometheus scrapes every node. `down -v` leaves
nothing behind.
The commands run are the ones docs/compose.md shows (tests/test_compose.py checks)."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import time
import urllib.request
import uuid
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest

from tests.helpers.compose import (
    BUILD,
    DOWN,
    DUMP,
    IMAGE,
    MIGRATE,
    MONITOR,
    MONITOR_OFF,
    RESTORE,
    ROLL,
    SECRET_NAMES,
    UP,
    UP_AGAIN,
)
from tests.helpers.compose_cluster import (
    FAILOVER_S,
    NODES,
    PORTS,
    REPO,
    TICK,
    Cluster,
    db_now,
    docker_usable,
    free_port,
    prometheus,
    tick_slots,
    why_missing,
)
from tests.helpers.fleet import every_slots
from tests.helpers.waiting import until

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.compose, pytest.mark.timeout(1200)]


def _upgrade_from() -> str:
    """The commit whose image the nodes start on: the parent of the tree's commit (itself in
    a clone without history), or PULSE_UPGRADE_FROM."""
    if "PULSE_UPGRADE_FROM" in os.environ:
        return os.environ["PULSE_UPGRADE_FROM"]
    parent = subprocess.run(
        ["git", "rev-parse", "--verify", "-q", "HEAD~1"], cwd=REPO, capture_output=True
    )
    return "HEAD~1" if parent.returncode == 0 else "HEAD"


@pytest.fixture
def cluster() -> Iterator[Cluster]:
    reason = docker_usable()
    if reason:
        pytest.skip(reason)
    project = f"pulse-e2e-{uuid.uuid4().hex[:8]}"
    env = {
        **os.environ,
        "COMPOSE_PROJECT_NAME": project,
        **{name: str(free_port()) for name in PORTS},
        **{name: f"e2e-{uuid.uuid4().hex}" for name in SECRET_NAMES},
    }
    run = Cluster(project, env)
    try:
        yield run
    finally:
        # A frozen container would not stop: thaw everything of the project, then remove it.
        with contextlib.suppress(subprocess.SubprocessError):
            paused = subprocess.run(
                [
                    "docker",
                    "ps",
                    "-q",
                    "--filter",
                    f"label=com.docker.compose.project={project}",
                    "--filter",
                    "status=paused",
                ],
                capture_output=True,
                text=True,
                timeout=60,
            ).stdout.split()
            for container in paused:
                subprocess.run(["docker", "unpause", container], capture_output=True, timeout=60)
            subprocess.run(
                ["bin/compose", "down", "-v", "--remove-orphans", "-t", "5"],
                cwd=REPO,
                env=env,
                capture_output=True,
                timeout=300,
            )
        print("\n".join(run.log))


def test_the_compose_cluster(cluster: Cluster, tmp_path: Path) -> None:
    run = cluster
    started = time.monotonic()
    old = run.sh(IMAGE.replace("HEAD~1", _upgrade_from())).strip()
    run.sh(BUILD, PULSE_TRIAL="1")
    new = "pulse:dev"
    for check in ("pulse --version", "python -c 'import pulsecron'", "pulse node --help", "id -u"):
        out = run.docker("run", "--rm", new, "sh", "-c", f'"{check}"')
        if check == "id -u":
            assert out.strip() != "0", "the image runs as root"
    run.log.append(f"image size: {run.docker('image', 'inspect', '-f', '{{.Size}}', new).strip()}")

    # The cluster on the parent commit's image, up and settled.
    run.sh(UP, PULSE_IMAGE=old)
    run.wait_settled(set(NODES), "every node joined, every shard held")
    until(
        lambda: run.query(
            "SELECT 1 FROM runs WHERE job_name = 'rate-limit-sync' AND status = 'succeeded' LIMIT 1"
        ),
        "an example job fired",
        60,
    )
    web = f"http://127.0.0.1:{run.env['PUBLISH_WEB']}"
    with urllib.request.urlopen(f"{web}/api/health", timeout=10) as answer:
        assert json.load(answer) == {"ok": True}
    with urllib.request.urlopen(f"{web}/", timeout=10) as answer:
        assert answer.status == 200 and "<html" in answer.read().decode().lower()

    # The monitoring profile: Prometheus scrapes every node, and its rules see every shard held.
    run.sh(MONITOR, PULSE_IMAGE=old)
    shards = run.status()["shard_count"]
    until(
        lambda: (
            prometheus(run, 'count(up{job="pulse"} == 1) == 3')
            and prometheus(run, f"pulse:shards_held:sum == {shards}")
        ),
        "Prometheus scraped every node and recorded every shard held",
        FAILOVER_S,
    )
    run.sh(MONITOR_OFF)

    jobs = tmp_path / "tick.yaml"
    jobs.write_text(
        "jobs:\n"
        f"  - name: {TICK}\n"
        '    schedule: "@every 1s"\n'
        "    handler: examples.handlers:session_sweep\n"
        "    catch_up: backfill\n"
        # An attempt in flight on the node killed, frozen or cut off is recorded lost, and
        # with no retry left the slot is recorded failed and not run again (recovery.md):
        # the ledger holds, but the slot never succeeds. Retries run it again at once.
        "    retries: 3\n"
        "    retry_backoff: 1s\n"
    )
    applied = run.pulse("jobs", "apply", str(jobs))
    assert applied.returncode == 0, applied.stderr
    first = until(
        lambda: run.query("SELECT min(scheduled_for) FROM runs WHERE job_name = %s", TICK)[0][0],
        "the tick job fired",
        60,
    )

    # Rolling upgrade: migrate, then one node at a time, each settled before the next.
    run.sh(MIGRATE, NEW=new)
    for node in NODES:
        run.sh(ROLL.format(service=node), NEW=new)
        run.wait_settled(set(NODES), f"{node} upgraded and settled")
    run.sh(ROLL.format(service="web"), NEW=new)
    images = {
        run.docker("inspect", "-f", "'{{.Config.Image}}'", run.container(n)).strip() for n in NODES
    }
    assert images == {new}

    env = {"PULSE_IMAGE": new}
    run.env.update(env)
    # Killed: the others take its shards; started again, it rejoins.
    a = run.container("node-a")
    run.docker("kill", a)
    run.wait_settled({"node-b", "node-c"}, "node-a killed, its shards taken")
    run.docker("start", a)
    run.wait_settled(set(NODES), "node-a rejoined")

    # Frozen: failed over while paused; rejoins when thawed.
    b = run.container("node-b")
    run.docker("pause", b)
    run.wait_settled({"node-a", "node-c"}, "node-b frozen, its shards taken")
    run.docker("unpause", b)
    run.wait_settled(set(NODES), "node-b rejoined")

    # Cut off from the network: failed over; rejoins when connected again.
    c = run.container("node-c")
    network = f"{run.project}_default"
    run.docker("network", "disconnect", network, c)
    run.wait_settled({"node-a", "node-b"}, "node-c cut off, its shards taken")
    run.docker("network", "connect", "--alias", "node-c", network, c)
    run.wait_settled(set(NODES), "node-c rejoined")

    # Every tick slot from the first to a few seconds ago ran exactly once.
    last = db_now(run) - timedelta(seconds=3)
    checking = time.monotonic()
    try:
        until(lambda: not tick_slots(run, first, last)[0], "every tick slot ran", FAILOVER_S)
    except AssertionError:
        pytest.fail(why_missing(run, first, last))
    late = run.query(
        "SELECT max(started_at - scheduled_for), count(*) FILTER (WHERE history IS NOT NULL)"
        " FROM runs WHERE job_name = %s AND scheduled_for BETWEEN %s AND %s",
        TICK,
        first,
        last,
    )[0]
    run.log.append(
        f"every tick slot ran: {time.monotonic() - checking:.1f}s"
        f" (latest start {late[0]} after its slot, {late[1]} rewritten)"
    )
    missing, doubled = tick_slots(run, first, last)
    assert not missing and not doubled, why_missing(run, first, last)
    run.log.append(f"tick slots checked: {len(every_slots(1, first, last))}")
    # The slot ledger agrees: no slot of the range missing, no final record overwritten.
    audit = run.pulse("audit", "--job", TICK, "--from", first.isoformat(), "--to", last.isoformat())
    assert audit.returncode == 0, audit.stdout + audit.stderr

    # Backed up, the volume removed, restored: the runs are back and the cluster settles.
    dump = tmp_path / "pulse.dump"
    run.sh(DUMP.replace("pulse.dump", str(dump)))
    runs = run.query("SELECT count(*) FROM runs WHERE scheduled_for <= %s", last)[0][0]
    run.sh(DOWN)
    run.sh(f"{UP_AGAIN} postgres")
    run.sh(RESTORE.replace("pulse.dump", str(dump)))
    run.sh(UP_AGAIN)
    assert run.query("SELECT count(*) FROM runs WHERE scheduled_for <= %s", last)[0][0] == runs
    run.wait_settled(set(NODES), "restored and settled")

    run.sh(DOWN)
    assert run.leftovers() == []
    run.log.append(f"whole test: {time.monotonic() - started:.1f}s")
