"""Replay fidelity and the unprofiled projection on every sample (and shared) trace, against measured unprofiled steps.

    python benchmarks/validate_projection.py [TRACE ...]

Without arguments: every sample trace (sample_traces/*.json.gz and its rank folders) and every trace
of ../shared/traces when it is there. One markdown row per rank: steady steps, traced median step,
replayed median step and its error, the trust gate (trusted, or the one-line reason it abstains),
the projected unprofiled median step with the default overhead (low–high from its range), and,
where docs/measurements or docs/validation.md holds the same steps timed without a profiler, the
measured value and the projection's error. Then the model's cost against `analyze` on
sample_traces/gpt2_decode.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import numpy as np

import tracekit
from tracekit.analyzers.analysis import analyze
from tracekit.analyzers.step_plan import plan_steps
from tracekit.model import DEFAULT_OVERHEAD, fidelity, project_steps, step_graphs

ROOT = Path(__file__).resolve().parent.parent
SAMPLES = ROOT / "sample_traces"
SHARED = ROOT / ".." / "shared" / "traces"
PAIRS = ROOT / "docs" / "measurements" / "pairs.json"
# Unprofiled steps of the train_* samples: docs/validation.md, "Steady state and host-side bottlenecks"
# (the script's mean step over steps 4..23 without a profiler, H200, 2026-11-30).
VALIDATION_MS = {
    "train_dataloader": 41.39, "train_dataloader_fixed": 7.54, "train_sync": 12.13, "train_sync_fixed": 9.61,
    "train_copies": 15.45, "train_copies_fixed": 6.97, "train_compile": 9.27,
}
# pairs.json (run 1): (pair, side, key) of the CUDA-event median per iteration / per token.
PAIR_KEYS = {
    "small_matmul_loop": ("small_matmul", "loop"), "small_matmul_graph": ("small_matmul", "cuda_graph"),
    "small_matmul_bmm": ("small_matmul", "bmm"), "elementwise_eager": ("elementwise", "eager"),
    "elementwise_compiled": ("elementwise", "compiled"), "linear_fp32": ("linear", "fp32_tf32_off"),
    "linear_tf32": ("linear", "tf32"), "linear_bf16": ("linear", "bf16"),
    "attention_naive": ("attention", "naive"), "attention_sdpa": ("attention", "sdpa"),
    "gpt2_decode": ("gpt2_decode", "eager"), "gpt2_decode_graph": ("gpt2_decode", "cuda_graph"),
}


def measured_ms() -> dict[str, tuple[float, str]]:
    """Sample stem -> (measured unprofiled step in ms, where it comes from)."""
    out = {stem: (ms, "validation.md") for stem, ms in VALIDATION_MS.items()}
    if PAIRS.exists():
        pairs = json.loads(PAIRS.read_text())
        for stem, (pair, side) in PAIR_KEYS.items():
            entry = pairs.get(pair, {}).get(side, {})
            value = entry.get("event_ms_median", entry.get("event_ms_per_token_median"))
            if value is not None:
                out[stem] = (float(value), "pairs.json")
    return out


def traces(args: list[str]) -> list[Path]:
    if args:
        return [Path(a) for a in args]
    found = sorted(p for p in SAMPLES.rglob("*.json.gz") if "capture_traces" not in p.parts)
    if SHARED.is_dir():
        sys.path.insert(0, str(ROOT / "tests"))
        from conftest import shared_trace_files

        found += shared_trace_files()
    return found


def label(path: Path) -> str:
    for base in (SAMPLES, SHARED):
        try:
            return str(path.resolve().relative_to(base.resolve()))
        except ValueError:
            continue
    return path.name


def stem(path: Path) -> str:
    return path.name.split(".trace.json")[0].split(".json")[0]


def rows(path: Path, measured: dict[str, tuple[float, str]]) -> list[str]:
    out = []
    for rank in tracekit.load_trace(path).ranks.values():
        plan = plan_steps(rank)
        graphs = step_graphs(rank, plan)
        gate = fidelity(rank, plan, graphs)
        name = f"`{label(path)}`"
        if not gate.replays:
            out.append(f"| {name} | {rank.rank} | 0 | – | – | – | abstains: {gate.reason} | – | – | – |")
            continue
        steps = project_steps(rank, plan, DEFAULT_OVERHEAD, graphs, gate.replays)
        traced = float(np.median([s.traced_span_us for s in steps])) / 1e3
        replayed = float(np.median([s.replayed_span_us for s in steps])) / 1e3
        projected = float(np.median([s.projected_span_us for s in steps])) / 1e3
        low = float(np.median([s.projected_low_us for s in steps])) / 1e3
        high = float(np.median([s.projected_high_us for s in steps])) / 1e3
        verdict = "trusted" if gate.trusted else f"abstains: {gate.reason}"
        meas = measured.get(stem(path)) if path.resolve().is_relative_to(SAMPLES.resolve()) else None
        meas_cell, err_cell = ("–", "–") if meas is None else (
            f"{meas[0]:.3f} ({meas[1]})", f"{(projected - meas[0]) / meas[0]:+.0%}")
        out.append(f"| {name} | {rank.rank} | {len(steps)} | {traced:.3f} | {replayed:.3f} | "
                   f"{gate.median_error:.2%} | {verdict} | {projected:.3f} ({low:.3f}–{high:.3f}) | {meas_cell} | "
                   f"{err_cell} |")
    return out


def cost(path: Path, repeats: int = 5) -> tuple[float, float, float, float]:
    """Best of `repeats` seconds: load_trace, analyze, the step plan (analyze builds it too; the model
    reads it), and the model (graphs + trust gate + projection with its range)."""
    best = [float("inf")] * 4
    for _ in range(repeats):
        t0 = time.perf_counter()
        trace = tracekit.load_trace(path)
        t1 = time.perf_counter()
        analyze(trace)
        t2 = time.perf_counter()
        rank = trace.rank()
        plan = plan_steps(rank)
        t3 = time.perf_counter()
        graphs = step_graphs(rank, plan)
        gate = fidelity(rank, plan, graphs)
        project_steps(rank, plan, DEFAULT_OVERHEAD, graphs, gate.replays)
        t4 = time.perf_counter()
        best = [min(b, t) for b, t in zip(best, (t1 - t0, t2 - t1, t3 - t2, t4 - t3), strict=True)]
    return best[0], best[1], best[2], best[3]


def main(args: list[str]) -> int:
    measured = measured_ms()
    print(f"Projection overhead: {DEFAULT_OVERHEAD.per_event_us} µs per recorded CPU event "
          f"({DEFAULT_OVERHEAD.per_event_range_us[0]}–{DEFAULT_OVERHEAD.per_event_range_us[1]}), launch floor "
          f"{DEFAULT_OVERHEAD.launch_floor_us} µs, source: {DEFAULT_OVERHEAD.source}\n")
    print("| trace | rank | steady steps | traced median ms | replayed median ms | replay error (median) | "
          "trust gate | projected unprofiled ms (low–high) | measured unprofiled ms | projection error |")
    print("|---|---:|---:|---:|---:|---:|---|---:|---:|---:|")
    for path in traces(args):
        for row in rows(path, measured):
            print(row)
    decode = SAMPLES / "gpt2_decode.trace.json.gz"
    if decode.exists():
        load_s, analyze_s, plan_s, model_s = cost(decode)
        print(f"\nModel cost on {decode.name} (best of 5): {model_s * 1e3:.0f} ms given the step plan, "
              f"{(model_s + plan_s) * 1e3:.0f} ms with it, against analyze() {analyze_s * 1e3:.0f} ms "
              f"({model_s / analyze_s:.0%} / {(model_s + plan_s) / analyze_s:.0%}) and load + analyze "
              f"{(load_s + analyze_s) * 1e3:.0f} ms ({model_s / (load_s + analyze_s):.0%})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
