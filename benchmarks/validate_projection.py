"""Replay fidelity and the unprofiled projection on every sample (and shared) trace, against measured unprofiled steps.

    python benchmarks/validate_projection.py [TRACE ...]

Without arguments: every sample trace (sample_traces/*.json.gz and its rank folders) and every trace
of ../shared/traces when it is there. One markdown row per rank: steady steps, traced median step,
replayed median step and its error, the trust gate (trusted, or the one-line reason it abstains),
the fast kernel launch call and the per-event cost it gives, the projected unprofiled median step
with the default overhead (low–high from its range), and, where docs/measurements or
docs/validation.md holds the same steps timed without a profiler, the measured value and the
projection's error. Then the fit of the default overhead's two constants on those measured samples
and its leave-one-out errors (fit on all the others, test on the one left out), and the model's
cost against `analyze` on sample_traces/gpt2_decode.
"""

from __future__ import annotations

import dataclasses
import json
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

import tracekit
from tracekit.analyzers.analysis import analyze
from tracekit.analyzers.step_plan import StepPlan, plan_steps
from tracekit.model import DEFAULT_OVERHEAD, fidelity, launch_profile, project_steps, step_graphs
from tracekit.model.graph import StepGraph
from tracekit.model.projection import LaunchProfile, project_step
from tracekit.trace.model import RankTrace

ROOT = Path(__file__).resolve().parent.parent
SAMPLES = ROOT / "sample_traces"
SHARED = ROOT / ".." / "shared" / "traces"
PAIRS = ROOT / "docs" / "measurements" / "pairs.json"
OPTIMIZER_PAIRS = ROOT / "docs" / "measurements" / "optimizer_pairs.json"
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
# optimizer_pairs.json (run 1, the machine instance and hour the traces were recorded on): the training step.
OPTIMIZER_KEYS = {"train_optimizer_loop": "loop", "train_optimizer_fused": "fused"}


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
    if OPTIMIZER_PAIRS.exists():
        optimizer = json.loads(OPTIMIZER_PAIRS.read_text()).get("optimizer", {})
        for stem, side in OPTIMIZER_KEYS.items():
            if "event_ms_median" in optimizer.get(side, {}):
                out[stem] = (float(optimizer[side]["event_ms_median"]), "optimizer_pairs.json")
    return out


def measured_of(path: Path, rank: RankTrace, plan: StepPlan,
                measured: dict[str, tuple[float, str]]) -> tuple[float, str] | None:
    """The sample's measured unprofiled step (ms): its own bare steps (tracekit profile's bare run,
    median over the steady steps) when the file carries them, else the measurement files'."""
    if not path.resolve().is_relative_to(SAMPLES.resolve()):
        return None
    bare = rank.meta.bare
    if bare is not None:
        steady = [int(n) for n, keep in zip(plan.windows.numbers, plan.selected, strict=True) if keep]
        value = bare.median_us(steady)
        if value is not None:
            return value / 1e3, "bare run"
    return measured.get(stem(path))


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


@dataclass(frozen=True)
class Sample:
    """A measured sample's steady step graphs, their kernel launch calls and its unprofiled step (ms)."""

    graphs: tuple[StepGraph, ...]
    launches: LaunchProfile | None
    measured_ms: float


def rows(path: Path, measured: dict[str, tuple[float, str]], samples: dict[str, Sample]) -> list[str]:
    """The table's rows for the trace at `path`; its measured ranks are added to `samples`."""
    out = []
    for rank in tracekit.load_trace(path).ranks.values():
        plan = plan_steps(rank)
        graphs = step_graphs(rank, plan)
        gate = fidelity(rank, plan, graphs)
        name = f"`{label(path)}`"
        if not gate.replays:
            out.append(f"| {name} | {rank.rank} | 0 | – | – | – | abstains: {gate.reason} | – | – | – | – |")
            continue
        steps = project_steps(rank, plan, DEFAULT_OVERHEAD, graphs, gate.replays)
        traced = float(np.median([s.traced_span_us for s in steps])) / 1e3
        replayed = float(np.median([s.replayed_span_us for s in steps])) / 1e3
        projected = float(np.median([s.projected_span_us for s in steps])) / 1e3
        low = float(np.median([s.projected_low_us for s in steps])) / 1e3
        high = float(np.median([s.projected_high_us for s in steps])) / 1e3
        launches = steps[0].launches
        launch_cell = "–" if launches is None else f"{launches.fast_us:.2f} → {steps[0].per_event_us:.2f}"
        verdict = "trusted" if gate.trusted else f"abstains: {gate.reason}"
        meas = measured_of(path, rank, plan, measured)
        meas_cell, err_cell = ("–", "–") if meas is None else (
            f"{meas[0]:.3f} ({meas[1]})", f"{(projected - meas[0]) / meas[0]:+.0%}")
        if meas is not None:
            samples[label(path).split(".trace.json")[0]] = Sample(graphs, launch_profile(graphs), meas[0])
        out.append(f"| {name} | {rank.rank} | {len(steps)} | {traced:.3f} | {replayed:.3f} | "
                   f"{gate.median_error:.2%} | {verdict} | {launch_cell} | {projected:.3f} ({low:.3f}–{high:.3f}) | "
                   f"{meas_cell} | {err_cell} |")
    return out


PER_EVENT_GRID_US = np.arange(0.0, 30.0 + 1e-9, 0.1)
SCALE_GRID = np.arange(0.0, 8.0 + 1e-9, 0.05)
FREE_GRID_US = np.arange(2.0, 7.0 + 1e-9, 0.05)


def span_curve(sample: Sample) -> np.ndarray:
    """The median projected step (ms) of `sample` at each per-event cost of PER_EVENT_GRID_US (launch
    calls losing the default's median launch − floor): an overhead whose scale is the cost and whose
    launch_free_us sits 1 µs below the fast launch gives exactly that cost per event."""
    fast = sample.launches.fast_us if sample.launches is not None else 0.0
    curve = []
    for cost_us in PER_EVENT_GRID_US:
        overhead = dataclasses.replace(DEFAULT_OVERHEAD, per_event_scale=float(cost_us), launch_free_us=fast - 1.0)
        spans = [project_step(g, overhead, launches=sample.launches).projected_span_us for g in sample.graphs]
        curve.append(float(np.median(spans)) / 1e3)
    return np.array(curve)


def log_errors(samples: dict[str, Sample], curves: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Per sample, log(projected / measured) over the (scale, launch_free_us) grid."""
    scale, free = np.meshgrid(SCALE_GRID, FREE_GRID_US, indexing="ij")
    out = {}
    for name, sample in samples.items():
        if sample.launches is None:
            cost = np.full(scale.shape, DEFAULT_OVERHEAD.per_event_us(None))
        else:
            cost = scale * np.maximum(sample.launches.fast_us - free, 0.0)
        projected = np.interp(np.minimum(cost, PER_EVENT_GRID_US[-1]), PER_EVENT_GRID_US, curves[name])
        out[name] = np.log(projected / sample.measured_ms)
    return out


def best_fit(errors: dict[str, np.ndarray], leave_out: str | None = None) -> tuple[float, float, dict[str, float]]:
    """(scale, launch_free_us) with the least mean |log(projected / measured)| over the samples but
    `leave_out`, and every sample's relative error there."""
    loss = np.mean([np.abs(e) for name, e in errors.items() if name != leave_out], axis=0)
    k, m = np.unravel_index(int(np.argmin(loss)), loss.shape)
    return float(SCALE_GRID[k]), float(FREE_GRID_US[m]), {n: float(np.expm1(e[k, m])) for n, e in errors.items()}


def leave_one_out(samples: dict[str, Sample]) -> list[str]:
    """The fit on all measured samples and, per sample, the error of the fit on all the others."""
    curves = {name: span_curve(sample) for name, sample in samples.items()}
    errors = log_errors(samples, curves)
    scale, free, fitted = best_fit(errors)
    lines = [f"\n### Leave one out ({len(samples)} measured samples; per recorded event = scale × max(fast launch − "
             f"free, 0))\n", f"Fit on all: scale {scale:.2f}, free {free:.2f} µs; within ±15 %: "
             f"{sum(abs(e) <= 0.15 for e in fitted.values())} of {len(fitted)}\n",
             "| sample | fast launch µs | fit on all | left out: scale, free µs | error left out |", "|---|---:|---:|---:|---:|"]
    held = 0
    for name in sorted(samples):
        loo_scale, loo_free, loo = best_fit(errors, leave_out=name)
        held += abs(loo[name]) <= 0.15
        fast = samples[name].launches
        lines.append(f"| {name} | {'–' if fast is None else f'{fast.fast_us:.2f}'} | {fitted[name]:+.0%} | "
                     f"{loo_scale:.2f}, {loo_free:.2f} | {loo[name]:+.0%} |")
    lines.append(f"\nLeft out, within ±15 %: {held} of {len(samples)}")
    return lines


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
    overhead = DEFAULT_OVERHEAD
    print(f"Projection overhead: per recorded CPU event {overhead.per_event_scale} × (fast launch − "
          f"{overhead.launch_free_us} µs) (scale {overhead.scale_range[0]}–{overhead.scale_range[1]}), launch calls "
          f"lose median launch − {overhead.launch_floor_us} µs, source: {overhead.source}\n")
    print("| trace | rank | steady steps | traced median ms | replayed median ms | replay error (median) | "
          "trust gate | fast launch → per event µs | projected unprofiled ms (low–high) | measured unprofiled ms | "
          "projection error |")
    print("|---|---:|---:|---:|---:|---:|---|---:|---:|---:|---:|")
    samples: dict[str, Sample] = {}
    for path in traces(args):
        for row in rows(path, measured, samples):
            print(row)
    if samples:
        print("\n".join(leave_one_out(samples)))
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
