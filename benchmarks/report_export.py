"""`tracekit export` time and peak memory: a synthetic trace with N kernels (default 100k) and the samples.

Usage: python benchmarks/report_export.py [N_KERNELS] — prints, per trace, the input size (gzip and
JSON), the seconds to export and the peak resident memory of a child process that only exports, next to
the peak of one that only loads the trace (the baseline every command pays).
"""

from __future__ import annotations

import gzip
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

from report_scale import big_trace

ROOT = Path(__file__).resolve().parents[1]
CHILD = """
import resource, sys
from pathlib import Path
if sys.argv[1] == "export":
    from tracekit.pipeline.export import export
    export(sys.argv[2], Path(sys.argv[3]), force=True)
else:
    from tracekit.trace.load import load_trace
    load_trace(sys.argv[2])
print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)
"""


def _child(mode: str, path: Path, out: Path) -> tuple[float, float]:
    t0 = time.perf_counter()
    done = subprocess.run([sys.executable, "-c", CHILD, mode, str(path), str(out)], check=True,
                          capture_output=True, text=True)
    return time.perf_counter() - t0, float(done.stdout.strip().splitlines()[-1])


def measure(label: str, path: Path, tmp: Path) -> None:
    if path.name.endswith(".gz"):
        with gzip.open(path) as fh:
            raw = fh.read()
    else:
        raw = path.read_bytes()
    out = tmp / "out.json.gz"
    t_load, rss_load = _child("load", path, out)
    t_exp, rss_exp = _child("export", path, out)
    print(f"{label:44s} file {path.stat().st_size / 1e6:7.1f} MB  JSON {len(raw) / 1e6:7.1f} MB  "
          f"load {t_load:5.1f} s / {rss_load:6.0f} MB peak  export {t_exp:5.1f} s / {rss_exp:6.0f} MB peak  "
          f"out {out.stat().st_size / 1e6:6.1f} MB")


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 100_000
    with tempfile.TemporaryDirectory() as tmp:
        t = Path(tmp)
        measure(f"synthetic, {n:,} kernels", big_trace(t / "big.json", n), t)
        for p in sorted((ROOT / "sample_traces").glob("*.json.gz"), key=lambda p: -p.stat().st_size)[:3]:
            measure(f"sample_traces/{p.name}", p, t)


if __name__ == "__main__":
    main()
