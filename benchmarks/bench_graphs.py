"""Print how well graph replays are joined to ops, and what the join costs next to a full report.

usage: python benchmarks/bench_graphs.py [OUTDIR | TRACE ...] [--capture CAPTURE ...]

OUTDIR is what benchmarks/gpu/graph_traces.sh writes (its cases are found by name); a TRACE is any
trace file or directory (a capture_traces/ folder beside or inside it is used, plus --capture).
For each case: replayed GPU activities and the share of their GPU time that has an op, FLOPs and
bytes; the FLOP-known share of all GPU time before (no join) and after; the replayed GEMMs' FLOPs
per replay next to the model's (OUTDIR/graph_decode_shapes.json); and the time of the join (capture
loading + alignment) against the time of `tracekit report` on the same trace.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from tracekit.analyzers.costs.attribution import estimate_costs
from tracekit.analyzers.graphs import graph_replays
from tracekit.analyzers.kernels import CLASS, classify
from tracekit.trace import files, graphs, load
from tracekit.trace import tables as T

CASES = (  # (label, execution trace, capture traces) under a graph_traces.sh OUTDIR
    ("inline b1", "graph_decode_inline_b1.trace.json.gz", ()),
    ("inline b8", "graph_decode_inline_b8.trace.json.gz", ()),
    ("piecewise b8", "graph_decode_piecewise_b8.trace.json.gz", ()),
    ("split b1+b8", "graph_decode_split", ()),
    ("split, mismatched capture", "graph_decode_mismatch", ()),
)


def _cases(args: list[str], captures: list[str]) -> list[tuple[str, Path, list[Path]]]:
    out = []
    for a in args:
        p = Path(a)
        if p.is_dir() and (p / "graph_decode_split").is_dir():
            out += [(label, p / e, [p / c for c in caps]) for label, e, caps in CASES if (p / e).exists()]
        else:
            out.append((p.name, p, [Path(c) for c in captures]))
    return out


def _share(part: float, whole: float) -> str:
    return f"{100 * part / whole:5.1f}%" if whole > 0 else "    -"


def _known_us(rank, costs, col: str, rows: np.ndarray | None = None) -> float:
    dur = rank.gpu[T.GPU_DUR].to_numpy(dtype=float)
    known = ~np.isnan(costs.table[col].to_numpy(dtype=float))
    sel = known if rows is None else known & rows
    return float(dur[sel].sum())


def _model_flops(outdir: Path) -> dict[int, float]:
    path = outdir / "graph_decode_shapes.json"
    if not path.exists():
        return {}
    return {int(s["batch"]): float(s["flops_per_step"]) for s in json.loads(path.read_text())}


def run(label: str, exe: Path, caps: list[Path], model: dict[int, float]) -> None:
    t0 = time.perf_counter()
    raw = [load.load_file(p) for p in files.trace_files(exe)]
    t_load = time.perf_counter() - t0
    before = [estimate_costs(r, classify(r)) for r in raw]
    cap_paths = [q for c in caps for q in files.trace_files(c)] + files.capture_files(exe)
    t0 = time.perf_counter()
    cap_ranks = [load.load_file(p) for p in dict.fromkeys(cap_paths)]
    t_caps = time.perf_counter() - t0
    t0 = time.perf_counter()
    joined = [graphs.join_graphs(r, cap_ranks) for r in raw]
    t_join = time.perf_counter() - t0
    print(f"== {label}: {exe} ({len(cap_ranks)} capture trace(s))")
    for note in {n for j in joined for n in j.notes}:
        print(f"   note: {note}")
    for j, b in zip(joined, before, strict=True):
        rank = j.rank
        kc = classify(rank)
        costs = estimate_costs(rank, kc)
        gr = graph_replays(rank, costs)
        total = float(rank.gpu[T.GPU_DUR].sum())
        print(f"   FLOP-known share of all GPU time: before {_share(_known_us(rank, b, 'flops'), total)}"
              f"  after {_share(_known_us(rank, costs, 'flops'), total)}")
        if gr is None:
            print("   no graph replays")
            continue
        print(f"   {gr.line()}")
        rep = rank.gpu[T.GPU_GRAPH].to_numpy() >= 0
        print(f"   replayed GPU time {gr.gpu_us:.0f} us: op {_share(gr.matched_us, gr.gpu_us)}  FLOPs "
              f"{_share(_known_us(rank, costs, 'flops', rep), gr.gpu_us)}  bytes "
              f"{_share(_known_us(rank, costs, 'bytes', rep), gr.gpu_us)}")
        gemm = rep & (kc.table[CLASS].to_numpy() == "gemm")
        flops = float(np.nansum(costs.table["flops"].to_numpy()[gemm]))
        for g in gr.graphs:
            print(f"   graph {g.graph}: {g.launches} launches x {g.activities_per_replay} activities, "
                  f"{g.gpu_us_per_replay:.1f} us GPU / {g.span_us_per_replay:.1f} us span per replay, "
                  f"op {_share(g.matched_share * 1, 1)} from {g.source or '-'}")
        print(f"   replayed GEMM FLOPs: {flops:.4g} over {gr.launches} replays"
              + (f"; model per step: {', '.join(f'b{b}: {f:.4g}' for b, f in model.items())}" if model else ""))
    if not cap_ranks:  # what the inferred path alone gives (a capture inside the trace ignored)
        for r in [load.load_file(p) for p in files.trace_files(exe)]:
            rank = graphs.join_graphs(r, [], own_capture=False).rank
            gr = graph_replays(rank, estimate_costs(rank, classify(rank)))
            if gr is not None:
                print(f"   without its own capture: {gr.line()}")
    t0 = time.perf_counter()
    from tracekit.pipeline.reports import build_view
    from tracekit.report import write_view

    trace = load.load_trace(exe, captures=caps)
    with tempfile.TemporaryDirectory() as tmp:
        write_view(build_view(trace), Path(tmp) / "r.html", force=True)
    t_report = time.perf_counter() - t0
    match_s = t_caps + t_join
    print(f"   time: load {t_load:.2f}s, capture load {t_caps:.2f}s, join {t_join:.3f}s; full report "
          f"{t_report:.2f}s -> matching {100 * match_s / t_report:.1f}% of the report's time")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("paths", nargs="+")
    ap.add_argument("--capture", action="append", default=[])
    a = ap.parse_args()
    for label, exe, caps in _cases(a.paths, a.capture):
        model = _model_flops(Path(a.paths[0])) if Path(a.paths[0]).is_dir() else {}
        try:
            run(label, exe, caps, model)
        except Exception as exc:  # a benchmark: report the case and go on
            print(f"== {label}: failed: {type(exc).__name__}: {exc}", file=sys.stderr)


if __name__ == "__main__":
    main()
