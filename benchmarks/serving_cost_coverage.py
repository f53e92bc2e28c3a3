"""Print, per trace, the share of GPU kernel time with both FLOPs and bytes, and the ops holding the rest.

usage: python benchmarks/serving_cost_coverage.py [TRACE ...]   (default: the serving and inference
traces of ../shared/traces/tracelens). Capture traces in a `capture_traces/` folder beside a trace
are joined to its graph replays by the loader."""

from __future__ import annotations

import sys
from collections import Counter
from pathlib import Path

import numpy as np

import tracekit
from tracekit.analyzers.costs.attribution import BYTES, FLOPS, OP, estimate_costs
from tracekit.analyzers.kernels import classify
from tracekit.trace import tables

ROOT = Path(__file__).resolve().parents[1]
CORPUS = ROOT / ".." / "shared" / "traces" / "tracelens"
DEFAULT = ("inference/sglang_prefilldecode/sglang_Qwen3-8B_prefilldecode.json.gz",
           "inference/xdit_flux.1_aiter_sage/profile_trace_rank_0.json.gz", "b200/eager_trace.json.gz",
           "mi300/Falconsai_nsfw_image_detection__1016002.json.gz",
           "mi300/facebook_timesformer-base-finetuned-k400__1016002.json.gz")


def coverage(path: Path) -> tuple[float, list[tuple[str, float]]]:
    """(share of kernel time with FLOPs and bytes, [(op, share of kernel time) without them])."""
    trace = tracekit.load_trace(path)
    rank = next(iter(trace.ranks.values()))
    costs = estimate_costs(rank, classify(rank))
    gpu = rank.gpu
    kernel = gpu[tables.GPU_KIND].to_numpy(dtype=object) == tables.KIND_KERNEL
    dur = gpu[tables.GPU_DUR].to_numpy(dtype=float)
    t = costs.table
    known = ~np.isnan(t[FLOPS].to_numpy(dtype=float)) & ~np.isnan(t[BYTES].to_numpy(dtype=float))
    total = float(dur[kernel].sum())
    missing: Counter[str] = Counter()
    for op, d in zip(t[OP].to_numpy(dtype=object)[kernel & ~known], dur[kernel & ~known], strict=True):
        missing[str(op)] += float(d)
    share = float(dur[kernel & known].sum()) / total if total else 0.0
    return share, [(op, us / total) for op, us in missing.most_common(8)]


def main(argv: list[str]) -> int:
    paths = [Path(a) for a in argv] or [CORPUS / p for p in DEFAULT]
    for p in paths:
        if not p.exists():
            print(f"{p}: absent, skipped")
            continue
        share, rest = coverage(p)
        print(f"{100 * share:6.1f} %  {p.name}")
        for op, s in rest:
            print(f"          {100 * s:5.1f} %  {op[:100]}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
