"""The results table: one row per system and scenario, then the ratio Pulse / baseline.

``render`` prints it after a run; ``latest_full`` and ``markdown`` turn a results file back
into the table of its latest full run, which ``python -m bench --report`` writes into
bench/README.md between the ``BEGIN`` and ``END`` markers.
"""

from __future__ import annotations

import json
import statistics
from collections.abc import Collection, Sequence
from dataclasses import asdict, dataclass, fields
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench.fanout import DRAIN_TARGET, SHARE_TARGET
from bench.results import RATIO_EXTRAS, RATIO_FIELDS, Measure, ScenarioResult
from bench.sizes import DEFAULT

BEGIN = "<!-- report:begin -->"
END = "<!-- report:end -->"

COLUMNS = (
    ("scenario", 9),
    ("system", 8),
    ("expected", 8),
    ("fires", 7),
    ("miss", 5),
    ("dup", 4),
    ("lag p50", 8),
    ("lag p99", 8),
    ("lag max", 8),
    ("drain s", 7),
    ("node cpu/1k", 11),
    ("pg cpu/1k", 9),
    ("rss MB", 6),
)


def _num(value: float | int | None, digits: int = 1) -> str:
    if value is None:
        return "-"
    if isinstance(value, int):
        return str(value)
    return f"{value:.{digits}f}"


def _x(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}x"


def _row(cells: Sequence[str]) -> str:
    return "  ".join(
        cell.ljust(width) if i < 2 else cell.rjust(width)
        for i, (cell, (_, width)) in enumerate(zip(cells, COLUMNS, strict=True))
    ).rstrip()


def _measure_cells(scenario: str, label: str, m: Measure) -> list[str]:
    return [
        scenario,
        label,
        _num(m.expected),
        _num(m.fires),
        _num(m.missing),
        _num(m.duplicates),
        _num(m.lag_p50_ms),
        _num(m.lag_p99_ms),
        _num(m.lag_max_ms),
        _num(m.drain_s, 2),
        _num(m.node_cpu_per_1k_s, 3),
        _num(m.pg_cpu_per_1k_s, 3),
        _num(m.peak_rss_mb, 0),
    ]


def notes(result: ScenarioResult) -> list[str]:
    """Scenario-specific figures that do not fit the columns."""
    p, b = result.pulse.extra, result.baseline.extra
    r = result.ratios()
    found = []
    if result.scenario == "scale":
        for label, e in (("pulse", p), ("baseline", b)):
            found.append(
                f"{label}: claim p50 {_num(e.get('claim_p50_ms'), 2)} ms, "
                f"p99 {_num(e.get('claim_p99_ms'), 2)} ms ({e.get('claimed_rows')} rows), "
                f"a durable commit alone p50 {_num(e.get('commit_p50_ms'), 2)} ms, "
                f"p99 {_num(e.get('commit_p99_ms'), 2)} ms; "
                f"idle claim p99 {_num(e.get('idle_claim_p99_ms'), 2)} ms; "
                f"idle CPU per process {_num(e.get('idle_node_cpu_pct'), 2)}%, "
                f"postgres {_num(e.get('idle_pg_cpu_pct'), 2)}%"
            )
        found.append(
            f"ratio: claim p50 {_x(r.get('claim_p50_ms'))}, p99 {_x(r.get('claim_p99_ms'))}, "
            f"idle CPU {_x(r.get('idle_node_cpu_pct'))}"
        )
        for label, e in (("pulse", p), ("baseline", b)):
            within = e.get("live_claims_within_5ms")
            found.append(
                f"{label}, live {_num(e.get('live_s'), 0)} s: {_num(e.get('live_claims'), 0)} "
                f"claims, p50 {_num(e.get('live_claim_p50_ms'), 2)} ms, "
                f"p99 {_num(e.get('live_claim_p99_ms'), 2)} ms (from buckets), "
                f"{_num(None if within is None else within * 100, 1)}% within 5 ms, "
                f"{_num(e.get('live_claims_over_50ms'), 0)} over 50 ms"
            )
        found.append(
            f"ratio, live: claim p50 {_x(r.get('live_claim_p50_ms'))}, "
            f"p99 {_x(r.get('live_claim_p99_ms'))}"
        )
    if result.scenario in ("fanout", "fanout_once"):
        found.extend(_fanout_notes(result))
    if result.scenario == "audit":
        for label, e in (("pulse audit", p), ("rows alone", b)):
            found.append(
                f"{label}: {_num(e.get('audit_s'), 2)} s, "
                f"{_num(e.get('audit_s_per_million'), 3)} s and "
                f"{_num(e.get('cpu_s_per_million'), 3)} client CPU-s per million slots"
            )
        found.append(f"verdicts: {p.get('verdicts')}")
    if "release_p99_ms" in p:
        found.append(
            f"{_num(p.get('released'), 0)} slots released; a downstream started "
            f"{_num(p.get('release_p50_ms'), 1)}/{_num(p.get('release_p99_ms'), 1)}/"
            f"{_num(p.get('release_max_ms'), 1)} ms (p50/p99/max) after its upstream's "
            "completion (target p99 <= 1000 ms)"
        )
    if "chained_release_p99_ms" in p:
        found.append(
            f"chained (@after:): {_num(p.get('chained_released'), 0)} slots released, "
            f"{_num(p.get('chained_missing'), 0)} missing; a downstream started "
            f"{_num(p.get('chained_release_p50_ms'), 1)}/"
            f"{_num(p.get('chained_release_p99_ms'), 1)}/"
            f"{_num(p.get('chained_release_max_ms'), 1)} ms (p50/p99/max) after its upstream's "
            "completion"
        )
    if "longest_gap_s" in p:
        found.append(
            f"killed {p.get('killed')}: longest gap of any job "
            f"{_num(p.get('longest_gap_s'), 2)} s; "
            f"every shard held by its owner {_num(p.get('settle_s'), 2)} s after the kill; "
            f"{p.get('reruns_of_killed')} duplicates are slots it had started, run again after "
            "recovery (at least once)"
        )
    if "join_settle_s" in p:
        found.append(
            f"{p.get('joined')} joined: shards settled after {_num(p.get('join_settle_s'), 2)} s "
            f"(process start included); {p.get('left')} left: settled after "
            f"{_num(p.get('leave_settle_s'), 2)} s"
        )
    if result.scenario == "prune":
        found.append(
            f"pruning every {_num(result.params.get('prune_interval_s'), 0)} s removed "
            f"{_num(p.get('runs_pruned'), 0)} runs in the window; claims p50/p99 "
            f"{_num(p.get('window_claim_p50_ms'), 2)}/{_num(p.get('window_claim_p99_ms'), 2)} ms "
            f"against {_num(b.get('window_claim_p50_ms'), 2)}/"
            f"{_num(b.get('window_claim_p99_ms'), 2)} ms without pruning (from buckets): "
            f"{_x(r.get('window_claim_p50_ms'))}/{_x(r.get('window_claim_p99_ms'))}; "
            f"mean {_num(p.get('claim_mean_ms'), 2)} against {_num(b.get('claim_mean_ms'), 2)} ms"
        )
    if p.get("claims_per_1k_fires") is not None:
        found.append(
            f"pulse: {_num(p['claims_per_1k_fires'], 0)} claims per 1,000 fires, "
            f"{_num(p.get('claim_mean_ms'), 1)} ms each on average (from the nodes' metrics)"
        )
    if p.get("skipped_runs"):
        found.append(f"pulse recorded {p['skipped_runs']} skipped slots (catch-up)")
    if result.baseline_note:
        found.append(f"baseline: {result.baseline_note}")
    return found


def _met(value: float | None, target: float) -> str:
    return "-" if value is None else ("met" if value <= target else "missed")


def _fanout_notes(result: ScenarioResult) -> list[str]:
    small = result.params.get("fanout_tenants", result.params.get("fanout_once_tenants", 10))
    others = f"B..{chr(ord('A') + int(small))}"
    found = []
    for label, e in (("fairness on", result.pulse.extra), ("fairness off", result.baseline.extra)):
        found.append(
            f"{label}: A drained in {_num(e.get('a_drain_s'), 2)} s (due second to the start "
            f"of A's last run); {others} started {e.get('others_started')} runs, start lag "
            f"p50/p99/max {_num(e.get('others_lag_p50_ms'))}/{_num(e.get('others_lag_p99_ms'))}"
            f"/{_num(e.get('others_lag_max_ms'))} ms, the last at "
            f"{_num(e.get('others_share_of_a_drain'), 3)} of A's drain"
        )
    share = result.pulse.extra.get("others_share_of_a_drain")
    drain = result.ratios().get("a_drain_s")
    found.append(
        f"targets, fairness on: last {others} start / A's drain {_num(share, 3)} <= "
        f"{SHARE_TARGET:.2f} ({_met(share, SHARE_TARGET)}); A's drain on / off {_x(drain)} "
        f"<= {DRAIN_TARGET:.2f}x ({_met(drain, DRAIN_TARGET)})"
    )
    return found


def render(results: Sequence[ScenarioResult]) -> str:
    lines = [_row([name for name, _ in COLUMNS]), _row(["-" * w for _, w in COLUMNS])]
    for result in results:
        r = result.ratios()
        lines.append(_row(_measure_cells(result.scenario, "baseline", result.baseline)))
        lines.append(_row(_measure_cells(result.scenario, "pulse", result.pulse)))
        ratio_cells = ["", "ratio", "", "", "", ""]
        ratio_cells += [_x(r.get(f)) for f in RATIO_FIELDS]
        lines.append(_row(ratio_cells))
        lines.extend(f"{'':9}  - {note}" for note in notes(result))
    lines.append("lag in ms (slot -> handler start); cpu in CPU-seconds per 1,000 fires")
    return "\n".join(lines)


SPREAD_LABELS = dict(
    zip(RATIO_FIELDS, [name for name, _ in COLUMNS[6:]], strict=True),
    a_drain_s="A's drain",
    claim_p50_ms="claim p50",
    claim_p99_ms="claim p99",
    idle_claim_p99_ms="idle claim p99",
    idle_node_cpu_pct="idle cpu",
    idle_pg_cpu_pct="idle pg cpu",
    live_claim_p50_ms="live claim p50",
    live_claim_p99_ms="live claim p99",
    window_claim_p50_ms="claim p50",
    window_claim_p99_ms="claim p99",
)


def spread(results: Sequence[ScenarioResult]) -> str:
    """Each scenario's ratios over the rounds: the median, and the lowest and highest.

    One round's ratio moves by a quarter or more on a shared machine; the median of a few
    rounds is what a target is judged by."""
    lines = ["ratio Pulse / baseline over the rounds: median (lowest - highest)"]
    scenarios = list(dict.fromkeys(r.scenario for r in results))
    for scenario in scenarios:
        rounds = [r.ratios() for r in results if r.scenario == scenario]
        cells = []
        for key in (*RATIO_FIELDS, *RATIO_EXTRAS):
            values = [v for r in rounds if (v := r.get(key)) is not None]
            if values:
                cells.append(
                    f"{SPREAD_LABELS[key]} {_x(statistics.median(values))}"
                    f" ({_x(min(values))} - {_x(max(values))})"
                )
        lines.append(f"{scenario:9}  {len(rounds)} rounds: " + "; ".join(cells))
    return "\n".join(lines)


def plans(results: Sequence[ScenarioResult]) -> str:
    out = []
    for result in results:
        if result.scenario != "scale":
            continue
        for label, m in (("pulse", result.pulse), ("baseline", result.baseline)):
            out.append(f"claim plan ({label}, {result.params['scale_jobs']:,} jobs, 1% due):")
            out.extend(f"  {line}" for line in m.extra.get("plan", []))
    return "\n".join(out)


# -- the latest full run, from a results file ----------------------------------------------


@dataclass(frozen=True)
class Run:
    """One ``python -m bench`` invocation as recorded: its shared fields (``run``, ``date``,
    ``command``, ``machine``, ``commit``) and its scenarios, every round in order."""

    info: dict[str, Any]
    results: list[ScenarioResult]


def _measure(record: dict[str, Any]) -> Measure:
    known = {f.name for f in fields(Measure)}
    return Measure(**{k: v for k, v in record.items() if k in known})


def load(path: Path) -> list[Run]:
    """The runs of a JSON-lines results file, in file order (lines of one run share its
    ``run`` tag)."""
    runs: dict[str, Run] = {}
    with path.open(encoding="utf-8") as f:
        for line in f:
            if not line.strip():
                continue
            record = json.loads(line)
            result = ScenarioResult(
                scenario=record["scenario"],
                params=record.get("params", {}),
                pulse=_measure(record["pulse"]),
                baseline=_measure(record["baseline"]),
                baseline_note=record.get("baseline_note", ""),
                round=record.get("round", 1),
            )
            tag = str(record.get("run", record.get("date")))
            if tag not in runs:
                info = {k: record.get(k) for k in ("run", "date", "command", "machine", "commit")}
                runs[tag] = Run(info, [])
            runs[tag].results.append(result)
    return list(runs.values())


def is_full(run: Run, scenarios: Collection[str]) -> bool:
    """Every scenario measured, at the default sizes (no ``--quick``, no ``--set``)."""
    defaults = asdict(DEFAULT)
    missing = object()
    sizes = [(name, value) for r in run.results for name, value in r.params.items()]
    return set(scenarios) <= {r.scenario for r in run.results} and all(
        defaults.get(name, missing) == value for name, value in sizes
    )


def latest_full(runs: Sequence[Run], scenarios: Collection[str]) -> Run | None:
    return next((run for run in reversed(runs) if is_full(run, scenarios)), None)


def _when(date: str | None) -> str:
    if not date:
        return "an unrecorded date"
    return datetime.fromisoformat(date).astimezone(UTC).strftime("%Y-%m-%d %H:%M UTC")


def _machine(machine: dict[str, Any] | None) -> str:
    if not machine:
        return "not recorded"
    return (
        f"{machine.get('nproc', '?')} CPUs ({machine.get('cpu', '?')}), "
        f"Python {machine.get('python', '?')}, kernel {machine.get('kernel', '?')}"
    )


def markdown(run: Run) -> str:
    """The block ``--report`` puts between the markers: where and how the run was made,
    then its table (the last round's, and each ratio over the rounds if there were more)."""
    info = run.info
    rounds = sorted({r.round for r in run.results})
    last = [r for r in run.results if r.round == rounds[-1]]
    commit = f"commit `{info['commit']}`" if info.get("commit") else "commit not recorded"
    lines = [
        "<!-- Generated by `python -m bench --report` from the results file; "
        "edits here are overwritten. -->",
        "",
        f"Run `{info.get('run')}` of {_when(info.get('date'))}, {commit}: `{info.get('command')}`.",
        f"Machine: {_machine(info.get('machine'))}.",
        "",
        "```text",
        render(last),
    ]
    if len(rounds) > 1:
        lines += ["", f"(round {rounds[-1]} of {len(rounds)} above)", spread(run.results)]
    lines.append("```")
    return "\n".join(lines)


def write_report(readme: Path, block: str) -> None:
    """Replace what ``readme`` holds between ``BEGIN`` and ``END`` with ``block``."""
    text = readme.read_text(encoding="utf-8")
    start, end = text.find(BEGIN), text.find(END)
    if start < 0 or end < start:
        raise ValueError(f"{readme}: no {BEGIN} ... {END} markers")
    head = text[: start + len(BEGIN)]
    readme.write_text(f"{head}\n{block}\n{text[end:]}", encoding="utf-8")
