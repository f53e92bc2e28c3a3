"""Print, per trace, the share of GPU time that kernel classification leaves as `other`."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import tracekit
from tracekit.analyzers.kernels import CLASS, OTHER, classify
from tracekit.trace import tables as T

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_DIRS = (ROOT / ".." / "shared" / "traces", ROOT / "sample_traces")
TARGET = 0.02  # at most 2 % of GPU time may stay `other`


def trace_files(dirs: list[Path]) -> list[Path]:
    files: list[Path] = []
    for d in dirs:
        if d.is_file():
            files.append(d)
        elif d.is_dir():
            files.extend(sorted(p for p in d.rglob("*.json*") if p.suffix in (".json", ".gz")))
    return files


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("paths", nargs="*", type=Path, help="trace files or folders")
    parser.add_argument("--top", type=int, default=3, help="show the N largest `other` kernels")
    args = parser.parse_args(argv)
    files = trace_files(args.paths or list(DEFAULT_DIRS))
    print(f"{'trace':70s} {'gpu_ms':>9s} {'other%':>7s} {'ms':>6s}")
    worst = 0.0
    for path in files:
        try:
            trace = tracekit.load_trace(path)
        except tracekit.TracekitError as exc:
            print(f"{str(path)[-70:]:70s} skipped: {exc}")
            continue
        for rank in trace.ranks.values():
            t0 = time.perf_counter()
            kc = classify(rank)
            ms = (time.perf_counter() - t0) * 1e3
            label = f"{str(path)[-64:]}" + (f" r{rank.rank}" if len(trace.ranks) > 1 else "")
            print(f"{label:70s} {kc.total_us / 1e3:9.3f} {100 * kc.other_share:7.2f} {ms:6.0f}")
            worst = max(worst, kc.other_share)
            if kc.other_share > 0 and args.top:
                other = rank.gpu[kc.table[CLASS] == OTHER]
                top = other.groupby(T.GPU_NAME)[T.GPU_DUR].sum().sort_values(ascending=False)
                for name, dur in top.head(args.top).items():
                    print(f"    other {100 * dur / kc.total_us:6.2f}%  {name[:110]}")
    print(f"worst other share: {100 * worst:.2f}% (target <= {100 * TARGET:.0f}%)")
    return 0 if worst <= TARGET else 1


if __name__ == "__main__":
    sys.exit(main())
