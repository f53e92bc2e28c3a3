"""The whole `tracekit report` side by side with `json.load` and HTA, each a fresh process, alternating.

usage: python benchmarks/bench_report.py TRACE [TRACE ...] [--repeat 3] [--code DIR ...] [--no-hta]

Per trace and per run, in turn: `json.load` of the file; `tracekit report` (one process per
`--code` checkout, run with PYTHONPATH=DIR, so a before/after pair is measured in the same
alternation; default: this checkout); and, when HTA is installed, HTA's load plus its temporal,
idle, kernel and launch analyses. Prints the median wall time, CPU time (user + system) and peak
RSS of each (the process's own, from wait4), and the ratios to `json.load`; each checkout's bytecode
is compiled before the first run. On a shared machine the CPU times are the steadier comparison.
Build large traces with benchmarks/make_big_trace.py.
"""

from __future__ import annotations

import argparse
import gzip
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

JSON_CHILD = r"""
import gzip, json, sys
path = sys.argv[1]
with (gzip.open if path.endswith(".gz") else open)(path, "rb") as fh:
    json.load(fh)
"""

HTA_CHILD = r"""
import os, sys
from pathlib import Path
os.environ.setdefault("HTA_DISABLE_NS_ROUNDING", "1")
from hta.trace_analysis import TraceAnalysis
path = Path(sys.argv[1])
a = TraceAnalysis(trace_files={0: str(path)}, trace_dir=str(path.parent), include_last_profiler_step=True)
a.get_temporal_breakdown(visualize=False)
a.get_idle_time_breakdown(ranks=[0], visualize=False)
a.get_gpu_kernel_breakdown(visualize=False)
a.get_cuda_kernel_launch_stats(ranks=[0], visualize=False)
"""


def measure(cmd: list[str], env: dict[str, str] | None = None) -> tuple[float, float, int, float]:
    """(wall s, peak RSS MB, exit status, CPU s: user + system) of one process."""
    t = time.perf_counter()
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    return time.perf_counter() - t, usage.ru_maxrss / 1024, proc.returncode, usage.ru_utime + usage.ru_stime


def raw_mb(path: str) -> float:
    if path.endswith(".gz"):
        with gzip.open(path, "rb") as fh:
            return sum(len(chunk) for chunk in iter(lambda: fh.read(1 << 24), b"")) / 1e6
    return os.path.getsize(path) / 1e6


def has_hta() -> bool:
    return subprocess.run([sys.executable, "-c", "import hta.trace_analysis"], capture_output=True).returncode == 0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("traces", nargs="+")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--code", action="append", default=None, help="tracekit checkout to run (repeatable)")
    ap.add_argument("--no-hta", action="store_true")
    args = ap.parse_args()
    codes = [str(Path(c).resolve()) for c in (args.code or [str(ROOT)])]
    hta = not args.no_hta and has_hta()
    for code in codes:
        # bytecode first: a fresh checkout's first run compiles every module it imports (~0.2 s on this
        # machine), which made a fresh before-worktree look 9–14 % slower than a warm one
        subprocess.run([sys.executable, "-m", "compileall", "-q", str(Path(code) / "tracekit")],
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
    out = Path(tempfile.mkdtemp()) / "bench.report.html"
    print(f"{os.cpu_count()} cores, python {sys.version.split()[0]}, median of {args.repeat} runs "
          f"(alternating), peak RSS of each process")
    print("| trace (raw JSON) | step | wall | ÷ json.load | CPU | ÷ json.load | peak RSS |")
    print("|---|---|---:|---:|---:|---:|---:|")
    for trace in args.traces:
        steps: dict[str, list[tuple[float, float, int, float]]] = {}
        for _ in range(args.repeat):
            steps.setdefault("json.load", []).append(measure([sys.executable, "-c", JSON_CHILD, trace]))
            for code in codes:
                env = {**os.environ, "PYTHONPATH": code}
                cmd = [sys.executable, "-m", "tracekit", "report", "-q", "-j", "1", "--force", "-o", str(out), trace]
                steps.setdefault(f"tracekit report ({Path(code).name})", []).append(measure(cmd, env))
            if hta:
                steps.setdefault("HTA load + 4 analyses", []).append(measure([sys.executable, "-c", HTA_CHILD, trace]))
        base = statistics.median(w for w, *_ in steps["json.load"])
        base_cpu = statistics.median(c for *_, c in steps["json.load"])
        name = f"{Path(trace).name} ({raw_mb(trace):.1f} MB)"
        for step, runs in steps.items():
            wall = statistics.median(w for w, *_ in runs)
            rss = statistics.median(m for _, m, *_ in runs)
            cpu = statistics.median(c for *_, c in runs)
            failed = sum(1 for _, _, rc, _ in runs if rc != 0)
            note = f" ({failed} failed)" if failed else ""
            print(f"| {name} | {step}{note} | {wall:.2f} s | {wall / base:.2f}× | {cpu:.2f} s | {cpu / base_cpu:.2f}× "
                  f"| {rss:.0f} MB |")


if __name__ == "__main__":
    main()
