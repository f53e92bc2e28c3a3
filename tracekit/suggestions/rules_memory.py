"""Rules over the memory view and the step's passes: a larger batch where the step waits on per-step launches and syncs and the memory has room for it, and fewer, larger micro-batches where a training step accumulates gradients over many small ones."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from tracekit.analyzers.analysis import Analysis
from tracekit.analyzers.detectors import accumulation
from tracekit.analyzers.totals import DOMINANT_SHARE, HOST_BOUND, LAUNCH, LAUNCH_BOUND, MIXED, SYNC
from tracekit.suggestions.common import (
    Scope,
    fmt_bytes,
    fmt_us,
    in_headline,
    rank_tables,
    suggestion,
)
from tracekit.suggestions.model import Suggestion
from tracekit.suggestions.rules_batching import batch_samples, batched_roof

# The causes whose time a step spends once per step whatever its batch: the launches of the same
# kernels (with the Python and dispatch between them: gaps up to idle.LONG_GAP_US) and the same host
# syncs. Data loading and copies grow with the samples; longer CPU work between launches (cpu_work)
# is often per-sample preprocessing: a larger batch does not share those, so they count for nothing.
PER_STEP_CAUSES = (LAUNCH, SYNC)
MIN_MULTIPLE = 2  # the memory has room for at least twice the batch (the "≥ 2×")
# The largest multiple suggested: the estimate (MemoryView.batch_factor) assumes the memory a step
# frees again grows linearly with the batch; past 8× that is an extrapolation the H200 check
# (docs/validation.md, "Memory view") does not cover, and the step has usually stopped waiting on
# the host long before.
MAX_MULTIPLE = 8


def _per_step_wait(analysis: Analysis) -> tuple[float, dict[str, float]] | None:
    """(µs per rank of the window the GPU waits on per-step host work, that time by cause), or None
    when the GPU is the limit or the per-step causes hold less than DOMINANT_SHARE of the time the GPU
    does not compute (on the totals the verdict reads: projected without the profiler where it can)."""
    if analysis.verdict not in (LAUNCH_BOUND, HOST_BOUND, MIXED):
        return None  # gpu-bound (the GPU is the limit), communication-bound, undetermined, CPU-only
    head = analysis.headline
    rest = max(head.span_us - head.compute_us, 0.0)
    shared = sum(head.causes()[c] for c in PER_STEP_CAUSES)
    if rest <= 0 or shared < DOMINANT_SHARE * rest:
        return None  # the GPU mostly waits on data loading, copies or CPU work: they grow with the batch
    causes = analysis.totals.causes()
    n = max(len(analysis.ranks), 1)
    parts = {c: causes[c] / n for c in PER_STEP_CAUSES if causes.get(c, 0.0) > 0}
    return sum(parts.values()), parts


def multiple(factor: float) -> int:
    """The batch multiple suggested for a memory estimate of `factor`: the largest power of two at most
    min(factor, MAX_MULTIPLE); 0 below MIN_MULTIPLE."""
    if not factor >= MIN_MULTIPLE:
        return 0
    return min(2 ** math.floor(math.log2(factor)), MAX_MULTIPLE)


def larger_batch(analysis: Analysis) -> Suggestion | None:
    """A step that waits on per-step host work (launches, syncs) and whose memory has room for
    k ≥ 2× the batch: the same samples in 1/k of the steps share that wait. Per step's worth of
    samples: (1 − 1/k) × the wait, GPU time, data loading and copies taken to grow k× with the batch
    and none of the added GPU work to hide in the gaps. A training step that accumulates gradients over
    k ≥ 2 micro-batches (patterns.accumulation): fewer, larger micro-batches (micro_batches). Otherwise
    silent without [memory] events on every rank."""
    views = [r.memory for r in analysis.ranks]
    known = bool(views) and all(v is not None and v.batch_factor is not None for v in views)
    if any(len(t) for _, t in rank_tables(analysis, "accumulation") if t is not None):
        factor = min(v.batch_factor for v in views if v is not None and v.batch_factor is not None) if known else None
        return micro_batches(analysis, factor)
    if not known:
        return None
    found = _per_step_wait(analysis)
    if found is None:
        return None
    wait, parts = found
    factor = min(v.batch_factor for v in views if v is not None and v.batch_factor is not None)
    k = multiple(factor)
    if not k or wait <= 0:
        return None
    scope = Scope.of(analysis)
    saving = wait * (1.0 - 1.0 / k)
    per_step = scope.steps
    rows: list[dict[str, Any]] = []
    for r, v in zip(analysis.ranks, views, strict=True):
        assert v is not None and v.batch_factor is not None
        t = r.launch.totals
        steps = max(t.steps, 1)
        rows.append({"rank": r.rank, "peak_allocated": v.peak_allocated, "peak_reserved": v.peak_reserved,
                     "device_memory": v.device_memory, "batch_factor_estimate": v.batch_factor,
                     "batch_multiple": k, "span_us": t.span_us / steps, "gpu_busy_us": t.gpu_busy_us / steps,
                     "host_wait_us": sum(t.causes()[c] for c in PER_STEP_CAUSES) / steps})
    words = {LAUNCH: "launch gaps", SYNC: "host syncs"}
    split = " + ".join(f"{words[c]} {fmt_us(us / per_step)}" for c, us in parts.items())
    if len(parts) > 1:
        split += f" = {fmt_us(wait / per_step)}"
    formula = (f"per step's worth of samples: the time the GPU waits per step on host work it pays once a step "
               f"({split}) shared by {k}× the samples: {fmt_us(wait / per_step)} × "
               f"(1 − 1/{k}) = {fmt_us(saving / per_step)} per step, {fmt_us(saving)} over the window (the same "
               f"samples in 1/{k} of the steps). Assumes the host work per step stays as it is and the GPU time, "
               f"data loading and copies grow {k}× with the batch, none of the added GPU work hiding in the "
               "gaps (kernels that underfill the GPU at this batch grow less: the gain can be larger). "
               f"{k}× = the largest power of two within the memory estimate of {factor:.1f}× (at most "
               f"{MAX_MULTIPLE}×; an estimate: try it). Training: the optimizer steps {k}× less often for the "
               "same samples: scale the learning rate (or accumulate fewer micro-batches)")
    peak = max(v.peak_reserved if v.peak_reserved is not None else v.peak_allocated for v in views if v is not None)
    device = min(v.device_memory for v in views if v is not None and v.device_memory is not None)
    article = "an" if k == 8 else "a"  # "an 8×", "a 2×", "a 4×"
    title = (f"Try {article} {k}× larger batch: the GPU waits {fmt_us(wait / per_step)} per step on kernel launches "
             f"and syncs paid once a step ({analysis.verdict}), and the step peaks at {fmt_bytes(peak)} of "
             f"{fmt_bytes(device)} (estimate: ~{factor:.1f}× the batch fits); {k}× the samples share that wait")
    return suggestion("larger_batch", title, saving, scope, formula, rows)


def micro_batches(analysis: Analysis, factor: float | None) -> Suggestion | None:
    """larger_batch for gradient accumulation (accumulated_passes over the passes that do not clip
    per-sample gradients: those are batch_samples' per_sample_gradients)."""
    found = accumulated_passes(analysis, factor, per_sample=False)
    if found is None:
        return None
    rows, saving, (k, m) = found
    scope = Scope.of(analysis)
    x = rows[0]
    formula = (f"{k:.0f} forward+backward passes per optimizer step as {k / m:.0f} at {m:.0f}× the micro-batch: "
               + _passes_formula(scope, m, x["batched_step_us"], saving))
    size = x["forward_input_bytes"]
    if factor is None:
        memory = ("memory was not recorded (tracekit profile --memory, or profile_memory=True, records it "
                  "to check the fit)")
        if not math.isnan(size):
            memory += (f"; the forward's op inputs are ~{fmt_bytes(size)} per micro-batch, ~{fmt_bytes(size * m)} at "
                       f"{m:.0f}× (a rough size of the activations kept for the backward)")
    else:
        memory = f"the memory estimate allows ~{factor:.1f}× the batch"
    formula += f"; {memory}"
    title = (f"Accumulate fewer, larger micro-batches: each optimizer step runs the same forward+backward {k:.0f} "
             f"times with the same shapes ({x['launches_per_micro_batch']} launches each); "
             f"{m:.0f}× larger micro-batches ({k / m:.0f} per step, as memory allows) launch {m:.0f}× less often"
             + (f" (memory not recorded; the forward's inputs ~{fmt_bytes(size)} per micro-batch)"
                if factor is None and not math.isnan(size) else ""))
    return suggestion("larger_batch", title, saving, scope, formula, rows)


def per_sample_gradients(analysis: Analysis) -> Suggestion | None:
    """batch_samples for a loop of batch-1 forward+backward passes that clip each sample's gradients
    (accumulated_passes, per_sample: DP-SGD): one torch.func.vmap(torch.func.grad(...)) pass computes
    all k per-sample gradients, priced like k micro-batches run as one."""
    found = accumulated_passes(analysis, None, per_sample=True)
    if found is None:
        return None
    rows, saving, (k, m) = found
    scope = Scope.of(analysis)
    x = rows[0]
    formula = (f"{k:.0f} per-sample forward+backward passes per optimizer step as one vmapped pass over the {k:.0f} "
               "samples: " + _passes_formula(scope, m, x["batched_step_us"], saving))
    title = (f"Compute the per-sample gradients in one batched pass (torch.func.vmap(torch.func.grad(loss)) over "
             f"functional_call, or Opacus): each optimizer step runs a batch-1 forward+backward {k:.0f} times and "
             f"clips each sample's gradient ({x['launches_per_micro_batch']} launches each)")
    return suggestion("batch_samples", title, saving, scope, formula, rows)


def _passes_formula(scope: Scope, m: float, after_us: float, saving: float) -> str:
    """How accumulated_passes prices m passes run as one, with its numbers."""
    return (f"the step − max(the step / {m:.0f} (the passes' host work and launches {m:.0f}× less often), the "
            f"passes' GPU time with each kernel once at max(its time, its roof for {m:.0f}× the work, weights read "
            f"once) + the rest) = {fmt_us(scope.span_us / scope.steps)} − {fmt_us(after_us)} per step = "
            f"{fmt_us(saving / scope.steps)}")


def accumulated_passes(analysis: Analysis, factor: float | None, *,
                       per_sample: bool) -> tuple[list[dict[str, Any]], float, tuple[float, float]] | None:
    """Gradient accumulation over k ≥ 2 micro-batches of the same shapes before one optimizer step: m
    times larger micro-batches (m = k, or the largest power of two within the memory estimate `factor`
    when memory was recorded) run the passes' host work and launches m× less often and each kernel once
    at m× the work, at max(its time, its roof for that work): as traced, the step − max(the step / m, the
    passes' GPU time so batched + the rest of the GPU time). The what-if replay prices it unprofiled."""
    scope = Scope.of(analysis)
    device = analysis.device
    rows: list[dict[str, Any]] = []
    total, seen = 0.0, []
    for r, table in rank_tables(analysis, "accumulation"):
        p = r.patterns
        if table is None or not len(table) or p is None or device is None:
            continue
        t = table[in_headline(r, table[accumulation.AC_STEP].to_numpy())]
        t = t[t[accumulation.AC_PER_SAMPLE].astype(bool) == per_sample]
        if not len(t) or len(p.in_accumulation) != len(r.costs.table):
            continue
        k = float(np.median(t[accumulation.AC_MICRO_BATCHES].to_numpy(dtype=float)))
        m = k if factor is None else float(min(k, 2 ** math.floor(math.log2(factor)) if factor >= MIN_MULTIPLE else 1))
        if m < MIN_MULTIPLE:
            continue
        seen.append((k, m))
        roof = batched_roof(r, device, m, p.in_accumulation)
        steps = max(r.launch.totals.steps, 1)
        span = r.launch.totals.span_us / steps
        passes_gpu = float(t[accumulation.AC_GPU_US].sum()) / len(t)
        known_rows = p.in_accumulation & ~np.isnan(roof)
        share = int(known_rows.sum()) / max(int(p.in_accumulation.sum()), 1)
        batched = float(roof[known_rows].sum()) / m / steps + passes_gpu * (1 - share)
        rest = max(r.launch.totals.gpu_busy_us / steps - passes_gpu, 0.0)
        after = max(span / m, min(batched, passes_gpu) + rest)
        saving = max(span - after, 0.0) * scope.steps
        total += saving
        recorded = t[accumulation.AC_INPUT_BYTES].to_numpy(dtype=float)
        recorded = recorded[~np.isnan(recorded)]  # no input shapes recorded: unknown, without a warning
        activations = float(np.median(recorded)) if len(recorded) else float("nan")
        rows.append({"rank": r.rank, "micro_batches": k, "micro_batch_multiple": m,
                     "forward": str(t[accumulation.AC_OPS].iat[0]), "first_op": str(t[accumulation.AC_FIRST].iat[0]),
                     "launches_per_micro_batch": int(t[accumulation.AC_LAUNCHES].iat[0]),
                     "passes_gpu_us_per_step": passes_gpu, "batched_gpu_us": min(batched, passes_gpu),
                     "forward_input_bytes": activations, "memory_recorded": factor is not None,
                     "batched_step_us": after, "saving_us": saving})
    if not rows:
        return None
    return rows, total / scope.ranks, max(seen)


def samples_or_gradients(analysis: Analysis) -> Suggestion | None:
    """batch_samples: a per-sample loop with a size from the data (rules_batching.batch_samples), else
    per-sample gradients computed one sample at a time (per_sample_gradients)."""
    return batch_samples(analysis) or per_sample_gradients(analysis)
