"""Report size and render time: a synthetic trace with N kernels (default 100k) and the shared traces.

Usage: python benchmarks/report_scale.py [N_KERNELS] — prints load/analyse/render seconds and HTML size.
The synthetic trace has 2,000 distinct kernel names over 8 streams and 50 steps, each kernel launched
by a 4 µs call under an aten op, so table rows, chart points and timeline bins all hit their caps.
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from tracebuilder import TraceBuilder

import tracekit
from tracekit.pipeline.reports import build_view
from tracekit.report.html import render

SHARED = Path(__file__).resolve().parents[1] / ".." / "shared" / "traces"


def big_trace(path: Path, n: int, names: int = 2000, steps: int = 50) -> Path:
    b = TraceBuilder()
    per_step = max(1, n // steps)
    t = 0.0
    for i in range(n):
        if i % per_step == 0:
            b.annotation(f"ProfilerStep#{i // per_step}", t, per_step * 10.0)
        ext = b.op(f"aten::op{i % 50}", t, 8, **{"Input Dims": [[i % 64 + 1, 256]], "Input type": ["float"]})
        b.launch(t + 1, 4, f"kernel_{i % names}", t + 6, 3.0, ext=ext, stream=7 + i % 8)
        t += 10.0
    return b.write(path)


def measure(label: str, path: Path) -> None:
    t0 = time.perf_counter()
    trace = tracekit.load_trace(path)
    t1 = time.perf_counter()
    view = build_view(trace)
    t2 = time.perf_counter()
    html = render(view)
    t3 = time.perf_counter()
    kernels = sum(len(r.gpu) for r in trace.ranks.values())
    rows = sum(len(r.kernels.rows) for r in view.ranks)
    print(f"{label:58s} kernels {kernels:>7,}  load {t1 - t0:6.2f}s  analyse+view {t2 - t1:6.2f}s  "
          f"render {t3 - t2:5.2f}s  html {len(html.encode()) / 1e6:6.2f} MB  table rows {rows:,}")


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 100_000
    with tempfile.TemporaryDirectory() as tmp:
        measure(f"synthetic, {n:,} kernels", big_trace(Path(tmp) / "big.json", n))
    if SHARED.is_dir():
        files = sorted(p for p in SHARED.rglob("*.json*") if p.is_file())
        for p in sorted(files, key=lambda p: -p.stat().st_size)[:3]:
            measure(str(p.relative_to(SHARED)), p)
        measure("hta/trace_filter (2 ranks)", SHARED / "hta" / "trace_filter")
    for p in sorted((Path(__file__).resolve().parents[1] / "sample_traces").glob("*.json*")):
        measure(f"sample_traces/{p.name}", p)


if __name__ == "__main__":
    main()
