"""Print tracekit's and HTA's idle breakdown, launch counts and temporal breakdown side by side, with timings."""

from __future__ import annotations

import argparse
import logging
import sys
import time
import warnings
from pathlib import Path

import tracekit
from tracekit import hta_compat as H
from tracekit.analyzers.gputime import temporal_breakdown
from tracekit.analyzers.launch import launch_overhead

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT / ".." / "shared" / "traces"


def worst_idle_error(view, numbers) -> float:
    """Largest relative difference over (stream, idle category) cells, 0..1."""
    lo = launch_overhead(view, kernel_wait_us=H.HTA_KERNEL_WAIT_US)
    cols = {"host_wait": "host_wait_us", "kernel_wait": "kernel_wait_us", "other": "other_us"}
    ours = {(int(s["stream"]), c): float(s[col]) for s in lo.streams.to_dict("records") for c, col in cols.items()}
    theirs = H.idle_by_category(numbers.idle)
    worst = 0.0
    for key in set(ours) | set(theirs):
        a, b = ours.get(key, 0.0), theirs.get(key, 0.0)
        if max(a, b) > 0.01:
            worst = max(worst, abs(a - b) / max(a, b))
    return worst


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("paths", nargs="*", type=Path)
    parser.add_argument("--drop-last-step", action="store_true", help="HTA's default convention")
    args = parser.parse_args(argv)
    if not H.available():
        print("HTA is not installed (pip install 'tracekit[hta]' psutil)")
        return 1
    logging.disable(logging.WARNING)
    warnings.simplefilter("ignore")
    include_last = not args.drop_last_step
    files = args.paths or sorted(p for p in SHARED.rglob("*") if p.name.endswith((".json", ".json.gz")))
    print(f"{'trace':44s} {'idle err':>8s} {'launch tk/hta':>15s} {'busy tk':>12s} {'busy hta':>12s} "
          f"{'tk s':>6s} {'hta s':>6s}")
    for path in files:
        t0 = time.perf_counter()
        rank = tracekit.load_trace(path).rank()
        if not rank.has_gpu:
            continue
        view = H.hta_view(rank, include_last_profiler_step=include_last)
        tb = temporal_breakdown(view)
        lo = launch_overhead(view)
        tk_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        try:
            numbers = H.hta_numbers(path, rank.rank, include_last_profiler_step=include_last)
        except Exception as exc:  # HTA's own failures are reported, not raised
            print(f"{path.name[:44]:44s} HTA failed: {type(exc).__name__}: {str(exc)[:60]}")
            continue
        hta_s = time.perf_counter() - t0
        hta_busy = numbers.temporal["kernel_time"] - numbers.temporal["idle_time"]
        print(f"{path.name[:44]:44s} {100 * worst_idle_error(view, numbers):7.3f}% "
              f"{lo.totals.launches:>7d}/{numbers.launches:<7d} {tb.kernel_time_us - tb.idle_us:12.1f} "
              f"{hta_busy:12.1f} {tk_s:6.2f} {hta_s:6.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
