"""Pulse benchmarks: scenarios run against real node processes and a bare baseline.

``python -m bench`` creates a throwaway database (``pulse_bench_<random>``), runs every
scenario twice, once with Pulse nodes and once with the bare baseline loop (same claim
shape, no membership, ring, locks, executor or history), prints a table with the ratios
of the two and appends the results to a JSON-lines file. See ``bench/README.md``.

``bench`` may import ``cluster`` and ``ring``; nothing of ours imports ``bench``.
"""
