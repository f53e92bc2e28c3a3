"""Print load_trace wall time and peak RSS next to plain json.load of the same file, in one run.

usage: python benchmarks/bench_load.py TRACE [--repeat N]

Each measurement runs in a fresh child process so that peak RSS is its own; the parent prints
one table. Time is the median of N runs (default 3); RSS is the child's peak resident set.
"""

from __future__ import annotations

import argparse
import gzip
import os
import statistics
import subprocess
import sys
import time

CHILD = r"""
import gzip, json, resource, sys, time
mode, path = sys.argv[1], sys.argv[2]
base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
if mode == "json":
    t = time.perf_counter()
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rb") as fh:
        data = json.load(fh)
    dt = time.perf_counter() - t
else:
    from tracekit.trace.load import load_trace  # imported before the clock starts (tracekit is lazy)
    t = time.perf_counter()
    data = load_trace(path)
    dt = time.perf_counter() - t
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(dt, base * 1024, peak * 1024)
"""


def measure(mode: str, path: str) -> tuple[float, int, int]:
    out = subprocess.run([sys.executable, "-c", CHILD, mode, path], check=True, capture_output=True,
                         text=True).stdout.split()
    return float(out[0]), int(out[1]), int(out[2])


def raw_size(path: str) -> int:
    if path.endswith(".gz"):
        with gzip.open(path, "rb") as fh:
            return sum(len(chunk) for chunk in iter(lambda: fh.read(1 << 24), b""))
    return os.path.getsize(path)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("trace")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    size = raw_size(args.trace)
    rows = {}
    for _ in range(args.repeat):  # interleave so drift hits both equally
        for mode in ("json", "tracekit"):
            rows.setdefault(mode, []).append(measure(mode, args.trace))
    print(f"trace: {args.trace}  raw JSON {size / 1e6:.1f} MB, file {os.path.getsize(args.trace) / 1e6:.1f} MB")
    print(f"{'':22s} {'median s':>9s} {'min s':>7s} {'peak RSS MB':>12s} {'RSS/raw':>8s}")
    med = {}
    for mode, label in (("json", "json.load"), ("tracekit", "tracekit.load_trace")):
        times = [r[0] for r in rows[mode]]
        peak = max(r[2] for r in rows[mode])
        med[mode] = statistics.median(times)
        print(f"{label:22s} {med[mode]:9.3f} {min(times):7.3f} {peak / 1e6:12.0f} {peak / size:8.2f}")
    print(f"load_trace / json.load time: {med['tracekit'] / med['json']:.2f}x")


if __name__ == "__main__":
    time.perf_counter()
    main()
