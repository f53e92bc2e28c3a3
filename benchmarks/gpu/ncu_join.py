"""Join ncu's DRAM counters with the torch.profiler trace of the same ncu_kernels.py run, kernel by kernel.

  python benchmarks/gpu/ncu_join.py NCU.csv TRACE.json.gz CASES.json OUT.csv [NCU_NOCACHE.csv]

NCU.csv: `ncu --import X.ncu-rep --csv --page details --print-units base` (one row per kernel and
metric). NCU_NOCACHE.csv: the same run under `--cache-control none` (its three columns get the
prefix ncu_nocache_). TRACE: the tracekit trace of ncu_kernels.py (ProfilerStep#1 = the measured cases). Kernels
are matched in launch order; each trace kernel gets the `case:<name>` annotation whose CPU range
holds its launch. A name mismatch at the same position is reported in the `name_match` column.
"""

from __future__ import annotations

import csv
import gzip
import json
import sys
from pathlib import Path

METRICS = {
    "dram__bytes_read.sum": "ncu_dram_read_bytes",
    "dram__bytes_write.sum": "ncu_dram_write_bytes",
    "gpu__time_duration.sum": "ncu_duration_ns",
}
LAUNCH_CATS = ("cuda_runtime", "cuda_driver")
STEP = "ProfilerStep#1"


def read_ncu(path: Path) -> list[dict]:
    """Kernels in profiling order: ID, name, and the three metrics as floats."""
    rows: dict[int, dict] = {}
    with path.open(newline="") as f:
        lines = [ln for ln in f if ln.startswith('"')]  # skip ==PROF== lines and blanks
    for rec in csv.DictReader(lines):
        metric = rec.get("Metric Name")
        if metric not in METRICS:
            continue
        kid = int(rec["ID"])
        nvtx = next((v for k, v in rec.items() if k and k.startswith("thread Domain")), "") or ""
        case = nvtx.split("case:", 1)[1].split(":", 1)[0] if "case:" in nvtx else ""
        row = rows.setdefault(
            kid, {"ncu_id": kid, "ncu_case": case, "ncu_kernel": rec["Kernel Name"]}
        )
        value = rec["Metric Value"].replace(",", "")
        row[METRICS[metric]] = float(value) if value else float("nan")
    return [rows[k] for k in sorted(rows)]


def read_trace(path: Path) -> list[dict]:
    """Kernels of ProfilerStep#1 in start order, each with its `case:` annotation and duration."""
    opener = gzip.open if path.name.endswith(".gz") else open
    with opener(path, "rt") as f:
        events = json.load(f)["traceEvents"]
    step = next(e for e in events if e.get("name") == STEP and e.get("cat") == "user_annotation")
    lo, hi = step["ts"], step["ts"] + step["dur"]
    cases = sorted(
        (e["ts"], e["ts"] + e["dur"], e["name"][5:])
        for e in events
        if e.get("cat") == "user_annotation" and str(e.get("name", "")).startswith("case:")
    )
    launch_ts = {
        e["args"]["correlation"]: e["ts"]
        for e in events
        if e.get("cat") in LAUNCH_CATS and "correlation" in e.get("args", {})
    }
    out = []
    for e in sorted((e for e in events if e.get("cat") == "kernel"), key=lambda e: e["ts"]):
        ts = launch_ts.get(e.get("args", {}).get("correlation"))
        if ts is None or not lo <= ts <= hi:
            continue
        case = next((c for a, b, c in cases if a <= ts <= b), "")
        out.append({"case": case, "trace_kernel": e["name"], "trace_dur_us": e["dur"]})
    return out


def main() -> None:
    ncu_csv, trace, cases_json, out = map(Path, sys.argv[1:5])
    ncu = read_ncu(ncu_csv)
    extra = []
    if len(sys.argv) > 5:
        by_id = {r["ncu_id"]: r for r in read_ncu(Path(sys.argv[5]))}
        extra = [f"ncu_nocache_{v[4:]}" for v in METRICS.values()]
        for row in ncu:
            other = by_id.get(row["ncu_id"], {})
            for v in METRICS.values():
                row[f"ncu_nocache_{v[4:]}"] = other.get(v, float("nan"))
    tr = read_trace(trace)
    fits = {c["case"]: c["fits_l2"] for c in json.loads(cases_json.read_text())}
    if len(ncu) != len(tr):
        print(f"warning: ncu has {len(ncu)} kernels, the trace's {STEP} has {len(tr)}", file=sys.stderr)
    fields = [
        "case", "fits_l2", "trace_kernel", "ncu_kernel", "name_match", "case_match", "trace_dur_us",
        "ncu_duration_ns", "ncu_dram_read_bytes", "ncu_dram_write_bytes", *extra, "ncu_id",
    ]
    with out.open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=fields, extrasaction="ignore")
        w.writeheader()
        for t, n in zip(tr, ncu, strict=False):
            short = n["ncu_kernel"].split("(")[0].split("<")[0].split()[-1].split("::")[-1]
            w.writerow({
                **t, **n, "fits_l2": fits.get(t["case"], ""),
                "name_match": short in t["trace_kernel"],
                "case_match": n["ncu_case"] == t["case"],
            })
    print(f"{min(len(ncu), len(tr))} kernels joined -> {out}")


if __name__ == "__main__":
    main()
