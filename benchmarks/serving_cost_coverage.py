"""Print, per trace, the share of GPU kernel time with both FLOPs and bytes, and the ops holding the rest.

Communication kernels (collectives, point-to-point: class `communication`) are left out of the
share: their time is spent moving data between GPUs, which no FLOPs/bytes roofline describes; the
share of kernel time they hold is printed on its own line. Ops whose FLOPs are estimated from their
kernels' names and grids (costs.estimates) count as covered and are listed as estimated.

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
from tracekit.analyzers.kernels import CLASS, classify
from tracekit.trace import tables

ROOT = Path(__file__).resolve().parents[1]
CORPUS = ROOT / ".." / "shared" / "traces" / "tracelens"
DEFAULT = ("inference/sglang_prefilldecode/sglang_Qwen3-8B_prefilldecode.json.gz",
           "inference/xdit_flux.1_aiter_sage/profile_trace_rank_0.json.gz", "b200/eager_trace.json.gz",
           "mi300/Falconsai_nsfw_image_detection__1016002.json.gz",
           "mi300/facebook_timesformer-base-finetuned-k400__1016002.json.gz")


COMMUNICATION = "communication"


def coverage_detail(path: Path) -> tuple[float, list[tuple[str, float]], float, list[tuple[str, float]]]:
    """(share of compute kernel time with FLOPs and bytes, [(op, share) without them], share of all
    kernel time in communication kernels, [(op, share) estimated]); shares of compute kernel time."""
    trace = tracekit.load_trace(path)
    rank = next(iter(trace.ranks.values()))
    kc = classify(rank)
    costs = estimate_costs(rank, kc)
    gpu = rank.gpu
    kernel = gpu[tables.GPU_KIND].to_numpy(dtype=object) == tables.KIND_KERNEL
    comm = kernel & (kc.table[CLASS].to_numpy(dtype=object) == COMMUNICATION)
    compute = kernel & ~comm
    dur = gpu[tables.GPU_DUR].to_numpy(dtype=float)
    t = costs.table
    known = ~np.isnan(t[FLOPS].to_numpy(dtype=float)) & ~np.isnan(t[BYTES].to_numpy(dtype=float))
    total = float(dur[compute].sum())
    missing: Counter[str] = Counter()
    for op, d in zip(t[OP].to_numpy(dtype=object)[compute & ~known], dur[compute & ~known], strict=True):
        missing[str(op)] += float(d)
    share = float(dur[compute & known].sum()) / total if total else 0.0
    every = float(dur[kernel].sum())
    comm_share = float(dur[comm].sum()) / every if every else 0.0
    estimated = [(op, us / total) for op, us in costs.estimated] if total else []
    return share, [(op, us / total) for op, us in missing.most_common(8)], comm_share, estimated


def coverage(path: Path) -> tuple[float, list[tuple[str, float]]]:
    """(share of compute kernel time with FLOPs and bytes, [(op, share of it) without them])."""
    share, missing, _, _ = coverage_detail(path)
    return share, missing


def main(argv: list[str]) -> int:
    paths = [Path(a) for a in argv] or [CORPUS / p for p in DEFAULT]
    for p in paths:
        if not p.exists():
            print(f"{p}: absent, skipped")
            continue
        share, rest, comm, estimated = coverage_detail(p)
        print(f"{100 * share:6.1f} %  {p.name}   (communication: {100 * comm:.1f} % of kernel time, left out)")
        for op, s in estimated:
            print(f"          {100 * s:5.1f} %  {op[:100]}  (estimated from its kernels)")
        for op, s in rest:
            print(f"          {100 * s:5.1f} %  {op[:100]}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
