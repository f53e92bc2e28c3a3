"""Rules over the memory view: a larger batch where the step waits on per-step launches and syncs and the memory has room for it."""

from __future__ import annotations

import math
from typing import Any

from tracekit.analyzers.analysis import Analysis
from tracekit.analyzers.totals import DOMINANT_SHARE, HOST_BOUND, LAUNCH, LAUNCH_BOUND, MIXED, SYNC
from tracekit.suggestions.common import Scope, fmt_bytes, fmt_us, suggestion
from tracekit.suggestions.model import Suggestion

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
    and none of the added GPU work to hide in the gaps. Silent without [memory] events on every rank."""
    views = [r.memory for r in analysis.ranks]
    if not views or any(v is None or v.batch_factor is None for v in views):
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
