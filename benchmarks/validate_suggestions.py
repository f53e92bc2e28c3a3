"""Estimated vs measured savings of the suggestion rules on before/after sample-trace pairs.

  python benchmarks/validate_suggestions.py [SAMPLE_TRACES_DIR] [--pairs PAIRS_JSON]

For each pair, the rule runs on the "before" trace; its estimate per step (saving_us / steps) is
compared with the measured difference of the two traces' mean step spans (the same steps, recorded
with `tracekit profile --warmup 1`). With --pairs (benchmarks/gpu/measure_pairs.py's JSON: CUDA-event
timings without the profiler) the estimate's share of the step is also compared with the measured
share without the profiler. Prints a markdown table.
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

import tracekit
from tracekit.analyzers import analyze
from tracekit.suggestions import suggest

ROOT = Path(__file__).resolve().parents[1]
# (rule, before trace stem, after trace stem, key path of the before/after timings in pairs.json)
PAIRS = (
    ("cuda_graphs", "small_matmul_loop", "small_matmul_graph", ("small_matmul", "loop", "cuda_graph")),
    ("batch_bmm", "small_matmul_loop", "small_matmul_bmm", ("small_matmul", "loop", "bmm")),
    ("fuse_elementwise", "elementwise_eager", "elementwise_compiled", ("elementwise", "eager", "compiled")),
    ("lower_precision", "linear_fp32", "linear_tf32", ("linear", "fp32_tf32_off", "tf32")),
    ("use_sdpa", "attention_naive", "attention_sdpa", ("attention", "naive", "sdpa")),
    ("cuda_graphs", "gpt2_decode", "gpt2_decode_graph", ("gpt2_decode", "eager", "cuda_graph")),
    # timings: docs/measurements/optimizer_pairs.json (--pairs that file)
    ("fused_optimizer", "train_optimizer_loop", "train_optimizer_fused", ("optimizer", "loop", "fused")),
)


def _trace(directory: Path, stem: str) -> Path | None:
    for name in (f"{stem}.trace.json.gz", f"{stem}_10tok.trace.json.gz", f"{stem}.json.gz"):
        if (directory / name).exists():
            return directory / name
    return None


def _steps(a) -> list[float]:
    return [t.span_us for r in a.ranks for t in r.launch.step_totals]


def _event_us(pairs: dict, key: tuple[str, str, str]) -> tuple[float, float] | None:
    group = pairs.get(key[0]) or {}
    before, after = group.get(key[1]), group.get(key[2])

    def ms(x):
        if isinstance(x, dict):
            for k in ("event_ms_median", "event_ms_per_token_median"):
                if isinstance(x.get(k), (int, float)):
                    return float(x[k])
        return float(x) if isinstance(x, (int, float)) else None

    b, a = ms(before), ms(after)
    return (b * 1e3, a * 1e3) if b is not None and a is not None else None


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("traces", nargs="?", default=str(ROOT / "sample_traces"))
    ap.add_argument("--pairs", default=None)
    ap.add_argument("--formulas", action="store_true", help="print each estimate's formula under its row")
    args = ap.parse_args()
    directory = Path(args.traces)
    pairs = json.loads(Path(args.pairs).read_text()) if args.pairs else {}
    print("| rule | before trace | after trace | steps | before µs/step | after µs/step | estimated µs/step "
          "| measured µs/step (traces) | ratio | estimated % | measured % (CUDA events, no profiler) | ratio |")
    print("|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for rule, before, after, key in PAIRS:
        pb, pa = _trace(directory, before), _trace(directory, after)
        if pb is None or pa is None:
            print(f"| {rule} | {before} | {after} | missing trace | | | | | | | | |")
            continue
        ab, aa = analyze(tracekit.load_trace(pb)), analyze(tracekit.load_trace(pa))
        found = {s.id: s for s in suggest(ab)}
        sb, sa = _steps(ab), _steps(aa)
        mean_b, mean_a = statistics.fmean(sb), statistics.fmean(sa)
        measured = mean_b - mean_a
        est = found[rule].per_step_us if rule in found else 0.0
        ratio = f"{est / measured:.2f}" if measured > 0 else "–"
        est_pct = found[rule].saving_pct if rule in found else 0.0
        ev = _event_us(pairs, key)
        ev_txt, ev_ratio = "", ""
        if ev is not None and ev[0] > 0:
            ev_pct = 100 * (ev[0] - ev[1]) / ev[0]
            ev_txt = f"{ev_pct:.1f} ({ev[0]:.1f} → {ev[1]:.1f} µs)"
            ev_ratio = f"{est_pct / ev_pct:.2f}" if ev_pct > 0 else "–"
        print(f"| {rule} | {pb.name} | {pa.name} | {len(sb)} | {mean_b:.1f} | {mean_a:.1f} | {est:.1f} "
              f"| {measured:.1f} | {ratio} | {est_pct:.1f} | {ev_txt} | {ev_ratio} |")
        if rule in found and args.formulas:
            print(f"|  | formula: {found[rule].formula} | | | | | | | | | | |")


if __name__ == "__main__":
    main()
