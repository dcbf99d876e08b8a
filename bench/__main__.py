"""``python -m bench [--quick] [--scenarios steady,burst,...] [--rounds N] [--out FILE]``,
or ``python -m bench --report [--results FILE]``: the latest full run's table into
bench/README.md."""

from __future__ import annotations

import argparse
import asyncio
import logging
import shlex
import subprocess
import sys
from pathlib import Path

from bench import fleet, report
from bench.runner import SCENARIOS, print_report, run
from bench.sizes import DEFAULT, QUICK, override
from cluster.local.processes import free_port

HERE = Path(__file__).resolve().parent
DEFAULT_OUT = HERE / "results.jsonl"
DEFAULT_README = HERE / "README.md"


def write_report(results: Path, readme: Path) -> int:
    """Put the table of the latest full run in ``results`` into ``readme``."""
    try:
        latest = report.latest_full(report.load(results), SCENARIOS)
    except (OSError, ValueError, KeyError) as exc:
        print(f"bench: cannot read {results}: {exc}", file=sys.stderr)
        return 1
    if latest is None:
        print(
            f"bench: {results} has no full run (every scenario at the default sizes)",
            file=sys.stderr,
        )
        return 1
    try:
        report.write_report(readme, report.markdown(latest))
    except (OSError, ValueError) as exc:
        print(f"bench: {exc}", file=sys.stderr)
        return 1
    print(f"{readme}: the run of {latest.info.get('date')} ({latest.info.get('command')})")
    return 0


def _otel_sink() -> subprocess.Popen[bytes]:
    """Start the OTLP sink and make every Pulse node trace into it."""
    port = free_port()
    sink = subprocess.Popen([sys.executable, "-m", "bench.otlpsink", str(port)], cwd=HERE.parent)
    fleet.NODE_ENV.update(
        PULSE_OTEL="true", OTEL_EXPORTER_OTLP_TRACES_ENDPOINT=f"http://127.0.0.1:{port}/v1/traces"
    )
    return sink


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench",
        description="Benchmark Pulse nodes against the bare SKIP LOCKED baseline.",
    )
    parser.add_argument("--quick", action="store_true", help="tiny sizes (the test suite's)")
    parser.add_argument(
        "--scenarios",
        default=",".join(SCENARIOS),
        help=f"comma-separated, from {', '.join(SCENARIOS)} [default: all]",
    )
    parser.add_argument(
        "--out", type=Path, default=DEFAULT_OUT, help="JSON-lines file to append to"
    )
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="override one size (see bench/sizes.py), e.g. --set burst_jobs=2000",
    )
    parser.add_argument(
        "--profile",
        type=Path,
        metavar="DIR",
        help="py-spy the first Pulse node of each timed scenario into DIR (raw stacks)",
    )
    parser.add_argument(
        "--rounds",
        type=int,
        default=1,
        metavar="N",
        help="run the scenarios N times over, both systems each time, and print each "
        "ratio's median and range [default: 1]",
    )
    parser.add_argument(
        "--otel",
        action="store_true",
        help="Pulse nodes trace (--otel), exporting to a sink process started here",
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="log each phase")
    parser.add_argument("--keep", action="store_true", help="keep node logs and witness files")
    parser.add_argument(
        "--report",
        action="store_true",
        help="run nothing: write the table of the latest full run in --results into --readme",
    )
    parser.add_argument(
        "--results", type=Path, default=DEFAULT_OUT, help="results file read by --report"
    )
    parser.add_argument(
        "--readme", type=Path, default=DEFAULT_README, help="file --report writes into"
    )
    args = parser.parse_args(argv)
    if args.report:
        return write_report(args.results, args.readme)
    if args.verbose:
        logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    names = [n.strip() for n in args.scenarios.split(",") if n.strip()]
    unknown = [n for n in names if n not in SCENARIOS]
    if unknown or not names:
        parser.error(
            f"unknown scenario {', '.join(unknown) or '(none)'}; use {', '.join(SCENARIOS)}"
        )
    if args.rounds < 1:
        parser.error(f"--rounds must be at least 1, got {args.rounds}")
    command = shlex.join(["python", "-m", "bench", *(argv if argv is not None else sys.argv[1:])])
    try:
        sizes = override(QUICK if args.quick else DEFAULT, args.set)
    except ValueError as exc:
        parser.error(str(exc))
    sink = _otel_sink() if args.otel else None
    try:
        done, failed = asyncio.run(
            run(names, sizes, args.out, command, args.keep, args.profile, args.rounds)
        )
    finally:
        if sink is not None:
            sink.kill()
            sink.wait()
    print_report(done)
    if failed:
        print(f"failed: {', '.join(failed)} (see the messages above)", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
