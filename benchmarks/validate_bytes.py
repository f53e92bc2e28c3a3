"""Compare tracekit's estimated bytes per kernel with ncu's measured DRAM bytes; print a markdown table.

usage: python benchmarks/validate_bytes.py TRACE NCU_CSV [--step N] [--l2-mb 50] [--csv OUT.csv]

TRACE: a torch.profiler trace of a run; NCU_CSV: `ncu --csv --print-units base --metrics
dram__bytes_read.sum,dram__bytes_write.sum,gpu__time_duration.sum` of the same kernels in the same
order (ncu's `--log-file` output or `ncu --import X.ncu-rep --csv --page details`). Kernels are
matched in launch order by their short name (`ncu` and Kineto demangle differently); with --step N
only the trace's kernels of ProfilerStep#N take part. Kernels whose estimated bytes are below the
L2 size are marked `fits L2`: the ±30 % target applies to the others.
"""

from __future__ import annotations

import argparse
import csv
import math
import re
import sys

import tracekit
from tracekit.analyzers.costs.attribution import BYTES, OP, SHAPES, estimate_costs
from tracekit.analyzers.kernels import classify

METRICS = ("dram__bytes_read.sum", "dram__bytes_write.sum", "gpu__time_duration.sum")


def short(name: str, keep: int = 1) -> str:
    """The kernel's function name without return type, templates or arguments, and with only its
    last `keep` namespaces (one for matching: ncu and Kineto demangle namespaces differently)."""
    name = re.sub(r"\(anonymous namespace\)|<unnamed>", "anon", name)
    depth, out = 0, []
    for ch in name:
        if ch == "<":
            depth += 1
        elif ch == ">":
            depth -= 1
        elif ch == "(" and depth == 0:
            break
        elif depth == 0:
            out.append(ch)
    text = "".join(out).strip()
    if not text:
        return name
    return "::".join(text.split()[-1].split("::")[-keep:])


def read_ncu(path: str) -> list[dict]:
    rows: dict[int, dict] = {}
    with open(path, newline="") as fh:
        lines = [ln for ln in fh if ln.startswith('"')]
    for rec in csv.DictReader(lines):
        if rec.get("Metric Name") not in METRICS:
            continue
        row = rows.setdefault(int(rec["ID"]), {"name": rec["Kernel Name"]})
        value = rec["Metric Value"].replace(",", "")
        row[rec["Metric Name"]] = float(value) if value else math.nan
    return [rows[k] for k in sorted(rows)]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("trace")
    ap.add_argument("ncu_csv")
    ap.add_argument("--step", type=int, default=None)
    ap.add_argument("--l2-mb", type=float, default=50.0)
    ap.add_argument("--csv", default=None)
    args = ap.parse_args()

    rank = tracekit.load_trace(args.trace).rank()
    costs = estimate_costs(rank, classify(rank)).table
    gpu = rank.gpu
    keep = gpu["kind"] == "kernel"
    if args.step is not None:
        keep &= gpu["step"] == args.step
    order = gpu[keep].sort_values("ts").index.tolist()
    ncu = read_ncu(args.ncu_csv)

    out, j = [], 0
    for m in ncu:
        while j < len(order) and short(gpu.at[order[j], "name"]) != short(m["name"]):
            j += 1
        if j == len(order):
            print(f"no trace kernel matches ncu kernel {m['name'][:80]!r}", file=sys.stderr)
            break
        i = order[j]
        j += 1
        est = costs.at[i, BYTES]
        measured = m.get("dram__bytes_read.sum", math.nan) + m.get("dram__bytes_write.sum", math.nan)
        out.append({
            "kernel": short(gpu.at[i, "name"], 2 if short(gpu.at[i, "name"]) == "kernel" else 1)[:48],
            "op": costs.at[i, OP] or "",
            "shapes": costs.at[i, SHAPES] or "",
            "estimated_mb": est / 1e6,
            "read_mb": m.get("dram__bytes_read.sum", math.nan) / 1e6,
            "write_mb": m.get("dram__bytes_write.sum", math.nan) / 1e6,
            "measured_mb": measured / 1e6,
            "ratio": est / measured if measured else math.nan,
            "fits_l2": bool(est < args.l2_mb * 1e6) if not math.isnan(est) else "",
        })

    print("| kernel | op | shapes | estimated MB | DRAM read MB | DRAM write MB | read+write MB | est/meas | L2 |")
    print("|---|---|---|---:|---:|---:|---:|---:|---|")
    for r in out:
        est = "unknown" if math.isnan(r["estimated_mb"]) else f"{r['estimated_mb']:.1f}"
        ratio = "" if math.isnan(r["ratio"]) else f"{r['ratio']:.2f}"
        l2 = "fits L2" if r["fits_l2"] is True else ""
        print(f"| `{r['kernel']}` | {r['op']} | {r['shapes']} | {est} | {r['read_mb']:.1f} | "
              f"{r['write_mb']:.1f} | {r['measured_mb']:.1f} | {ratio} | {l2} |")
    big = [r for r in out if r["fits_l2"] is False and not math.isnan(r["ratio"])]
    inside = [r for r in big if abs(r["ratio"] - 1) <= 0.30]
    print(f"\n{len(inside)} of {len(big)} kernels with data above {args.l2_mb:.0f} MB within ±30 %")
    if args.csv:
        with open(args.csv, "w", newline="") as fh:
            w = csv.DictWriter(fh, fieldnames=list(out[0]) if out else ["kernel"])
            w.writeheader()
            w.writerows(out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
