"""A node refuses, at startup, settings that would break the cluster's guarantees."""

from __future__ import annotations

from cluster.settings import ClusterSettings
from cluster.store.jobs import JobStore
from tests.helpers.cli import spawn


async def test_shard_count_differing_from_the_database_is_refused(
    store: JobStore, settings: ClusterSettings
) -> None:
    result = spawn(settings, "node", "--node-id", "n1", "--shards", "32").result()
    assert result.returncode == 2
    assert "--shards 32 but the database has 16" in result.stderr


async def test_session_timeout_too_close_to_poll_interval_is_refused(
    store: JobStore, settings: ClusterSettings
) -> None:
    result = spawn(settings, "node", "--session-timeout", "2s", "--poll-interval", "1s").result()
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "session timeout 2.0s is not well above" in lines[0]


async def test_bad_node_flags_exit_2_with_one_line(
    store: JobStore, settings: ClusterSettings
) -> None:
    for args, field in (
        (["--concurrency", "0"], "concurrency"),
        (["--lease", "-3s"], "lease"),
        (["--node-id", "bad id"], "node_id"),
    ):
        result = spawn(settings, "node", *args).result()
        lines = result.stderr.strip().splitlines()
        assert result.returncode == 2, (args, result.stderr)
        assert len(lines) == 1 and field in lines[0], (args, lines)


async def test_uninitialised_schema_is_reported_not_crashed(settings: ClusterSettings) -> None:
    # No `pulse init` ran for this schema: the node keeps retrying; jobs commands say why.
    result = spawn(settings, "jobs", "list").result()
    assert result.returncode == 1
    assert "pulse init" in result.stderr and "Traceback" not in result.stderr
