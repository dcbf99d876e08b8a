"""The Prometheus endpoint: the collector over Stats/NodeState, and a real node scraped twice."""

from __future__ import annotations

import ipaddress
import re
import socket
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from cluster.jobs.spec import JobSpec
from cluster.local.processes import free_port
from cluster.settings import ClusterSettings
from node.metrics import FIRE_LAG_BUCKETS, build_registry
from node.state import NodeState
from node.stats import Stats
from tests.helpers.nodes import Nodes, init_cluster
from tests.helpers.waiting import until

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]
METRICS_MD = Path(__file__).resolve().parents[2] / "docs" / "metrics.md"
# connection and statement: bounded by the node's connections and its named statements
# (cluster/store/tally.py).
ALLOWED_LABELS = {
    "outcome",
    "dependency",
    "node_id",
    "zone",
    "version",
    "le",
    "connection",
    "statement",
}


def parse(text: str) -> Samples:
    found: Samples = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            found[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return found


def value(samples: Samples, name: str, **labels: str) -> float:
    return samples[(name, tuple(sorted(labels.items())))]


def scrape_registry(registry: object) -> Samples:
    return parse(generate_latest(registry).decode())  # type: ignore[arg-type]


def test_collector_reads_stats_at_scrape_time() -> None:
    stats = Stats()
    state = NodeState("n-1", "a", 16, live=("n-1", "n-2"), held=frozenset({1, 2, 3}))
    in_flight = [0]
    registry = build_registry(stats, lambda: state, lambda: in_flight[0])

    first = scrape_registry(registry)
    assert value(first, "pulse_slots_fired_total") == 0
    assert value(first, "pulse_shards_held") == 3
    assert value(first, "pulse_members") == 2
    assert value(first, "pulse_node_info", node_id="n-1", zone="a", version=_version(first)) == 1
    assert value(first, "pulse_runs_total", outcome="failed") == 0
    assert value(first, "pulse_errors_total", dependency="redis") == 0

    for lag in (0.002, 0.2, 7.0):
        stats.fired += 1
        stats.fire_lag_seconds.append(lag)
    stats.outcomes["succeeded"] += 2
    stats.outcomes["failed"] += 1
    stats.retries += 1
    stats.fenced_writes += 1
    stats.db_errors += 4
    stats.locks_acquired += 3
    in_flight[0] = 5
    state.held = frozenset({1})

    second = scrape_registry(registry)
    assert value(second, "pulse_slots_fired_total") == 3
    assert value(second, "pulse_runs_total", outcome="succeeded") == 2
    assert value(second, "pulse_runs_total", outcome="failed") == 1
    assert value(second, "pulse_retries_total") == 1
    assert value(second, "pulse_fenced_writes_total") == 1
    assert value(second, "pulse_errors_total", dependency="postgres") == 4
    assert value(second, "pulse_shard_locks_acquired_total") == 3
    assert value(second, "pulse_runs_in_flight") == 5
    assert value(second, "pulse_shards_held") == 1
    assert value(second, "pulse_fire_lag_seconds_count") == 3
    assert value(second, "pulse_fire_lag_seconds_sum") == pytest.approx(7.202)
    assert value(second, "pulse_fire_lag_seconds_bucket", le="0.005") == 1
    assert value(second, "pulse_fire_lag_seconds_bucket", le="0.25") == 2
    assert value(second, "pulse_fire_lag_seconds_bucket", le="10.0") == 3

    # A scrape with no new fires counts nothing twice: the histogram is cumulative.
    third = scrape_registry(registry)
    assert value(third, "pulse_fire_lag_seconds_count") == 3


def documented_metrics() -> set[str]:
    """The metric names docs/metrics.md lists: ``pulse_a_{b,c}_total`` is two, a trailing
    ``{labels}`` is no part of the name."""
    names: set[str] = set()
    for name in re.findall(
        r"`(pulse_[a-z_]*?(?:_\{[a-z,]+\}[a-z_]*)?)(?:\{[a-z_,]+\})?`",
        METRICS_MD.read_text("utf-8"),
    ):
        head, _, rest = name.partition("_{")
        if not rest:
            names.add(name)
            continue
        parts, _, tail = rest.partition("}")
        names |= {f"{head}_{part}{tail}" for part in parts.split(",")}
    return names


def test_docs_metrics_md_lists_every_metric_a_node_serves() -> None:
    stats = Stats()
    stats.runs_table_rows, stats.runs_table_bytes = 10.0, 8192  # set by the pruner
    state = NodeState("n-1", "a", 16, live=("n-1",), held=frozenset({1}))
    text = generate_latest(build_registry(stats, lambda: state, lambda: 0)).decode()
    served = {
        family.name + ("_total" if family.type == "counter" else "")
        for family in text_string_to_metric_families(text)
        if family.name.startswith("pulse_")
    }
    assert served == documented_metrics()


def test_histogram_keeps_counting_past_the_window() -> None:
    stats = Stats()
    registry = build_registry(stats, lambda: None, lambda: 0)
    window = stats.fire_lag_seconds.maxlen
    assert window is not None
    for _ in range(window + 100):
        stats.fired += 1
        stats.fire_lag_seconds.append(0.01)
    samples = scrape_registry(registry)
    assert value(samples, "pulse_slots_fired_total") == window + 100
    assert value(samples, "pulse_fire_lag_seconds_count") == window  # the window's worth
    stats.fired += 1
    stats.fire_lag_seconds.append(100.0)
    samples = scrape_registry(registry)
    assert value(samples, "pulse_fire_lag_seconds_count") == window + 1
    assert value(samples, "pulse_fire_lag_seconds_bucket", le="60.0") == window
    buckets = [
        value(samples, "pulse_fire_lag_seconds_bucket", le=repr(float(b))) for b in FIRE_LAG_BUCKETS
    ]
    assert buckets == sorted(buckets)


def test_labels_are_bounded() -> None:
    stats = Stats()
    state = NodeState("n-1", "a", 16)
    for outcome in ("succeeded", "failed", "timed_out", "cancelled"):
        stats.outcomes[outcome] += 1
    samples = scrape_registry(build_registry(stats, lambda: state, lambda: 0))
    pulse = [(name, labels) for name, labels in samples if name.startswith("pulse_")]
    assert pulse
    assert {key for _, labels in pulse for key, _ in labels} <= ALLOWED_LABELS
    assert len({labels for name, labels in pulse if name == "pulse_runs_total"}) == 4


def _version(samples: Samples) -> str:
    for name, labels in samples:
        if name == "pulse_node_info":
            return dict(labels)["version"]
    raise AssertionError("no pulse_node_info")


@pytest.fixture
def nodes(settings: ClusterSettings, tmp_path: Path) -> Iterator[Nodes]:
    init_cluster(settings, JobSpec.build("tick", "@every 1s", "shell:true"), shards=16)
    started = Nodes(settings, tmp_path)
    try:
        yield started
    finally:
        started.stop_all()


def scrape(port: int) -> Samples:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
        return parse(response.read().decode())


@pytest.mark.timeout(90)
def test_node_serves_metrics_that_move(nodes: Nodes) -> None:
    port = free_port()
    nodes.start("m-1", "a", "--metrics-port", str(port))

    first = until(
        lambda: (s := scrape(port)) and value(s, "pulse_slots_fired_total") >= 1 and s,
        "a first fired slot in the metrics",
        30,
    )
    fired = value(first, "pulse_slots_fired_total")
    second = until(
        lambda: (s := scrape(port)) and value(s, "pulse_slots_fired_total") > fired and s,
        "the fired counter to move",
        30,
    )
    assert value(second, "pulse_shards_held") == 16
    assert value(second, "pulse_shards") == 16
    assert value(second, "pulse_claiming") == 1
    assert value(second, "pulse_fire_lag_seconds_count") > value(
        first, "pulse_fire_lag_seconds_count"
    )
    assert value(second, "pulse_claim_duration_seconds_count") > 0
    assert value(second, "pulse_shard_locks_acquired_total") >= 16
    assert value(second, "pulse_runs_total", outcome="succeeded") >= 1
    assert value(second, "pulse_node_info", node_id="m-1", zone="a", version=_version(second))
    assert ("process_cpu_seconds_total", ()) in second
    assert listening_on(port) == {"127.0.0.1"}, "loopback unless --metrics-bind says otherwise"


def listening_on(port: int) -> set[str]:
    """The IPv4 addresses a socket listens on at ``port`` (Linux's /proc/net/tcp)."""
    found = set()
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        local, state = line.split()[1], line.split()[3]
        address, _, hex_port = local.partition(":")
        if state == "0A" and int(hex_port, 16) == port:
            found.add(str(ipaddress.IPv4Address(bytes.fromhex(address)[::-1])))
    return found


@pytest.mark.timeout(90)
def test_busy_metrics_port_does_not_stop_the_node(nodes: Nodes) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        node = nodes.start("m-1", "a", "--metrics-port", str(taken.getsockname()[1]))
        until(
            lambda: any("cannot serve metrics" in line for line in node.lines()),
            "the metrics error to be logged",
            30,
        )
        assert node.proc.poll() is None
