"""Parts of a step, measured on an Analysis in µs per step: GPU idle by cause, and what each rule acts on.

All values are µs per step of the analysis's own step selection (its steady steps: `analysis.totals`,
`launch.steady_steps`). GPU idle is split as `tracekit.analyzers.idle` splits it (the totals'
`*_wait_us` / `*_gap_us` fields, which add up to the idle time); the pattern tables (chains, loops,
attention) already cover only the selected steps. A rule row (`tracekit.suggestions.rules.Rule.target`)
names the `StepPart` it acts on; `tracekit diff` measures that part before and after.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pandas as pd

from tracekit.analyzers import kernels, names
from tracekit.analyzers.analysis import Analysis
from tracekit.analyzers.detectors import (
    anomaly,
    attention,
    attention_mask,
    autotune,
    backward_passes,
    broadcast_distance,
    cache_growth,
    cleanup,
    compiled,
    embeddings,
    foreach,
    frozen_grads,
    full_logits,
    gqa_expand,
    item_reads,
    l2_penalty,
    launch_blocking,
    layers,
    mask_build,
    offload,
    optimizer,
    recompiles,
    recompute,
    recurrent,
    samples,
    sdpa_fallback,
    sequences,
    static_cache,
    triton_launch,
    underfilled,
    unfold_conv,
    value_checks,
    weight_convert,
)
from tracekit.analyzers.totals import LaunchTotals

IDLE_TOTAL = "gpu_idle"
IDLE_OTHER = "other"  # what the parts below leave unexplained (rounding; nothing by construction)
# part name -> LaunchTotals field (tracekit.analyzers.idle), in the order shown
IDLE_PARTS: dict[str, str] = {
    "data_loading": "data_wait_us",  # the main thread is in the DataLoader
    "sync": "sync_wait_us",  # from a host sync until the CPU launched again
    "copies": "copy_wait_us",  # the CPU is blocked in a synchronous or pageable copy call
    "launch_gaps": "launch_gap_us",  # short CPU-late gaps: the eager launch path
    "cpu_work": "cpu_wait_us",  # longer CPU-late gaps: Python or CPU ops between launches
    "gpu_gaps": "gpu_gap_us",  # the next activity was already launched: a GPU-side wait
}


@dataclass(frozen=True)
class Selection:
    """The steps an analysis describes: their number and totals (all ranks), the step numbers per rank."""

    steps: int
    totals: LaunchTotals
    by_rank: dict[int, frozenset[int]]


# How one part of the step is measured: µs per step of the selection.
Measure = Callable[[Analysis, Selection], float]


@dataclass(frozen=True)
class StepPart:
    """A part of the step in words (`label`) and how to measure it (`measure`, µs per step)."""

    label: str
    measure: Measure


def steady(analysis: Analysis) -> Selection:
    """The analysis's step selection: `launch.steady_steps` per rank, totals from `analysis.totals`."""
    by_rank = {r.rank: frozenset(int(s) for s in r.launch.steady_steps) for r in analysis.ranks}
    return Selection(int(analysis.totals.steps), analysis.totals, by_rank)


def _patterns_total(analysis: Analysis, table: str, column: str) -> float:
    total = 0.0
    for r in analysis.ranks:
        t = getattr(r.patterns, table, None) if r.patterns is not None else None
        if t is not None and len(t):
            total += float(np.nansum(t[column].to_numpy(dtype=float)))
    return total


def per_step(total: float, n: int) -> float:
    return total / max(n, 1)


def class_time(analysis: Analysis, sel: Selection, *classes: str) -> float:
    """Kernel time of the given classes, µs per step."""
    c = analysis.classes
    return per_step(float(c.loc[c[kernels.SUM_KEY].isin(classes), kernels.SUM_TIME].sum()), sel.steps)


def total(field: str) -> Measure:
    """A LaunchTotals field of the selection, per step."""
    return lambda analysis, sel: per_step(float(getattr(sel.totals, field)), sel.steps)


def copies(analysis: Analysis, sel: Selection) -> float:
    """Copy GPU time plus GPU idle while the CPU was blocked in copy calls (what pinned memory cuts)."""
    return class_time(analysis, sel, kernels.MEMCPY) + per_step(sel.totals.copy_wait_us, sel.steps)


def gpu_idle(analysis: Analysis, sel: Selection) -> float:
    return per_step(sel.totals.gpu_idle_us, sel.steps)


def gemm_time(analysis: Analysis, sel: Selection) -> float:
    return class_time(analysis, sel, kernels.GEMM)


def precision_time(analysis: Analysis, sel: Selection) -> float:
    """GEMM, convolution and normalization kernel time, per step (what a lower precision speeds up)."""
    return class_time(analysis, sel, kernels.GEMM, kernels.CONV, kernels.NORMALIZATION)


def layout_transposes(analysis: Analysis, sel: Selection) -> float:
    """cuDNN's NCHW <-> NHWC transpose kernels (detectors/layers.py LAYOUT_TRANSPOSE), µs per step."""
    k = analysis.kernels
    if k is None or not len(k):
        return 0.0
    hit = names.matches(k["name"].to_numpy(dtype=object), layers.LAYOUT_TRANSPOSE)
    return per_step(float(k.loc[hit, "time_us"].sum()), sel.steps)


def underfilled_time(analysis: Analysis, sel: Selection) -> float:
    """Kernel time of the under-filled launch runs (Patterns.underfilled), µs per step."""
    return per_step(_patterns_total(analysis, "underfilled", underfilled.UF_BUSY_US), sel.steps)


def gqa_expand_time(analysis: Analysis, sel: Selection) -> float:
    """K/V expansion copies + the attention kernels they feed (Patterns.gqa_expand), µs per step."""
    return per_step(_patterns_total(analysis, "gqa_expand", gqa_expand.GQ_COPY_US)
                    + _patterns_total(analysis, "gqa_expand", gqa_expand.GQ_ATTN_US), sel.steps)


def full_logits_time(analysis: Analysis, sel: Selection) -> float:
    """The whole-logits kernels read at the last position (Patterns.full_logits), µs per step."""
    return per_step(_patterns_total(analysis, "full_logits", full_logits.FL_GEMM_US)
                    + _patterns_total(analysis, "full_logits", full_logits.FL_OTHER_US), sel.steps)


def frozen_backward_time(analysis: Analysis, sel: Selection) -> float:
    """Backward's GPU work past the last gradient the optimizer reads (Patterns.frozen_grads), µs per step."""
    return per_step(_patterns_total(analysis, "frozen_grads", frozen_grads.FG_CUT_US), sel.steps)


def l2_penalty_time(analysis: Analysis, sel: Selection) -> float:
    """Host time of the loss's L2 penalty (Patterns.l2_penalty: its forward run, backward calls and extra
    gradient accumulations) in the selected steps, µs per step."""
    frames = _selected(analysis, sel, "l2_penalty", l2_penalty.LP_STEP)
    return per_step(sum(float(t[l2_penalty.LP_CPU_US].sum()) for t in frames), sel.steps)


def repeated_backward_time(analysis: Analysis, sel: Selection) -> float:
    """GPU time of the weight layers' backward nodes and gradient accumulations in steps whose
    backward runs more than once (Patterns.backward_passes), µs per step."""
    frames = _selected(analysis, sel, "backward_passes", backward_passes.BP_STEP)
    return per_step(sum(float(t[backward_passes.BP_GPU_US].sum()) for t in frames), sel.steps)


def autotune_time(analysis: Analysis, sel: Selection) -> float:
    """Wall time of Triton's autotuner benchmarking inside the steps (Patterns.autotune windows), µs per step."""
    return per_step(_in_selection(analysis, sel, "autotune", autotune.AT_STEP, autotune.AT_WINDOW_US), sel.steps)


def item_reads_time(analysis: Analysis, sel: Selection) -> float:
    """Host time of the per-item read loops after their first item (Patterns.item_reads), µs per step."""
    return per_step(_in_selection(analysis, sel, "item_reads", item_reads.IR_STEP, item_reads.IR_HOST_US), sel.steps)


def value_checks_time(analysis: Analysis, sel: Selection) -> float:
    """Host time of the value checks read on the host in the loop (Patterns.value_checks), µs per step."""
    return per_step(_in_selection(analysis, sel, "value_checks", value_checks.VC_STEP, value_checks.VC_HOST_US), sel.steps)


def static_cache_time(analysis: Analysis, sel: Selection) -> float:
    """Kernel time of the decoding attention calls over a whole static cache (Patterns.static_cache), µs per step."""
    return per_step(_in_selection(analysis, sel, "static_cache", static_cache.SC_STEP, static_cache.SC_GPU_US), sel.steps)


def broadcast_distance_time(analysis: Analysis, sel: Selection) -> float:
    """Kernel time of the broadcast-difference distance chains (Patterns.broadcast_distance), µs per step."""
    return per_step(_in_selection(analysis, sel, "broadcast_distance", broadcast_distance.BD_STEP,
                                  broadcast_distance.BD_GPU_US), sel.steps)


def unfold_conv_time(analysis: Analysis, sel: Selection) -> float:
    """Kernel time of the im2col work a native convolution does not do (Patterns.unfold_conv: the
    im2col/col2im kernels and the column tensors' casts and copies), µs per step."""
    return per_step(sum(_in_selection(analysis, sel, "unfold_conv", unfold_conv.UC_STEP, column)
                        for column in (unfold_conv.UC_FOLD_US, unfold_conv.UC_COPY_US)), sel.steps)


def llm_chain_time(analysis: Analysis, sel: Selection) -> float:
    """Kernel time of the unfused LLM layer chains (Patterns.llm_chains), µs per step."""
    return per_step(_patterns_total(analysis, "llm_chains", layers.LC_TIME_US), sel.steps)


def elementwise_time(analysis: Analysis, sel: Selection) -> float:
    """Elementwise plus normalization kernel time, per step."""
    return class_time(analysis, sel, kernels.ELEMENTWISE, kernels.NORMALIZATION)


def attention_chain(analysis: Analysis, sel: Selection) -> float:
    """Unfused attention chains (scores GEMM → softmax → GEMM, forward and backward) and SDPA fallbacks' forward and backward
    kernels (sdpa_fallback), plus fused attention kernels, per step."""
    chains = (_patterns_total(analysis, "attention", attention.AT_TIME_US)
              + _patterns_total(analysis, "attention", attention.AT_BWD_US))
    for r in analysis.ranks:  # the math backend's (a slower fused backend's kernels are class attention)
        t = r.patterns.sdpa_fallback if r.patterns is not None else None
        if t is not None and len(t):
            math_rows = t[t[sdpa_fallback.SF_BACKEND] == attention_mask.MATH]
            chains += float(math_rows[sdpa_fallback.SF_FWD_US].sum() + math_rows[sdpa_fallback.SF_BWD_US].sum())
    return per_step(chains, sel.steps) + class_time(analysis, sel, kernels.ATTENTION)


def attention_time(analysis: Analysis, sel: Selection) -> float:
    """Attention-class kernel time (the fused SDPA kernels: flash, cuDNN, memory-efficient), per step."""
    return class_time(analysis, sel, kernels.ATTENTION)


def causal_mask_time(analysis: Analysis, sel: Selection) -> float:
    """Attention-class kernel time, plus the masks built in the steps (Patterns.mask_builds: their host
    time less the copy and sync calls' wait, and their copies and kernels), per step."""
    built = sum(_in_selection(analysis, sel, "mask_builds", mask_build.MB_STEP, column)
                for column in (mask_build.MB_HOST_US, mask_build.MB_GPU_US))
    return attention_time(analysis, sel) + per_step(built, sel.steps)


def gemm_loop(analysis: Analysis, sel: Selection) -> float:
    """Wall time of same-shape GEMM loops plus the GEMM time outside them, per step."""
    wall = per_step(_patterns_total(analysis, "loops", sequences.LP_WALL_US), sel.steps)
    busy = per_step(_patterns_total(analysis, "loops", sequences.LP_BUSY_US), sel.steps)
    return wall + max(class_time(analysis, sel, kernels.GEMM) - busy, 0.0)


def _selected(analysis: Analysis, sel: Selection, name: str, step_column: str) -> list[pd.DataFrame]:
    """Each rank's patterns.<name> table, its rows in the selected steps."""
    out = []
    for r in analysis.ranks:
        table = getattr(r.patterns, name, None) if r.patterns is not None else None
        if table is not None and len(table):
            out.append(table[table[step_column].isin(sorted(sel.by_rank.get(r.rank, frozenset())))])
    return out


def optimizer_time(analysis: Analysis, sel: Selection) -> float:
    """Wall time of the Optimizer.step ranges (on their CPU thread) in the selected steps, per step."""
    frames = _selected(analysis, sel, "optimizer", optimizer.OS_STEP)
    return per_step(sum(float(t[optimizer.OS_CPU_US].sum()) for t in frames), sel.steps)


def offload_time(analysis: Analysis, sel: Selection) -> float:
    """Host time of the optimizer steps run on the host (patterns.offload) plus their gradient and
    weight copies' calls and syncs outside them, in the selected steps, per step."""
    frames = _selected(analysis, sel, "offload", offload.OF_STEP)
    return per_step(sum(float((t[offload.OF_HOST_US] + t[offload.OF_CALL_US]).sum()) for t in frames), sel.steps)


def foreach_loop_time(analysis: Analysis, sel: Selection) -> float:
    """CPU wall time of the per-tensor loops outside the optimizer (patterns.foreach_loops) in the
    selected steps, per step."""
    frames = _selected(analysis, sel, "foreach_loops", foreach.FL_STEP)
    return per_step(sum(float((t[foreach.FL_END] - t[foreach.FL_TS]).sum()) for t in frames), sel.steps)


def sample_loop_time(analysis: Analysis, sel: Selection) -> float:
    """Host wall time of the per-sample loops (patterns.sample_loops) in the selected steps, per step."""
    frames = _selected(analysis, sel, "sample_loops", samples.SL_STEP)
    return per_step(sum(float(t[samples.SL_HOST_US].sum()) for t in frames), sel.steps)


def step_span(analysis: Analysis, sel: Selection) -> float:
    return per_step(sel.totals.span_us, sel.steps)


# What a suggestion without a rule row (a cross-rank one) is measured on: the whole step.
WHOLE_STEP = StepPart("the step span", step_span)


def idle_parts(analysis: Analysis, sel: Selection) -> dict[str, float]:
    """GPU idle per step, then its parts (IDLE_PARTS, which add up to it), then what is left."""
    idle = gpu_idle(analysis, sel)
    parts = {name: per_step(float(getattr(sel.totals, field)), sel.steps) for name, field in IDLE_PARTS.items()}
    other = idle - sum(parts.values())
    return {IDLE_TOTAL: idle, **parts, IDLE_OTHER: 0.0 if abs(other) < 1e-6 * max(idle, 1.0) else other}


def column_time(table: str, step_col: str, column: str) -> Callable[[Analysis, Selection], float]:
    """The step part Σ `column` of the rows of patterns.`table` in the selected steps, µs per step."""
    return lambda analysis, sel: per_step(_in_selection(analysis, sel, table, step_col, column), sel.steps)


def _in_selection(analysis: Analysis, sel: Selection, table: str, step_col: str, column: str) -> float:
    """Σ `column` of the rows of patterns.`table` whose step is selected, over the ranks."""
    total_us = 0.0
    for r in analysis.ranks:
        t = getattr(r.patterns, table, None) if r.patterns is not None else None
        if t is None or not len(t):
            continue
        keep = t[step_col].isin(sorted(sel.by_rank.get(r.rank, frozenset())))
        total_us += float(t.loc[keep, column].astype(float).sum())
    return total_us


def graph_break_time(analysis: Analysis, sel: Selection) -> float:
    """Host time between consecutive compiled graphs at torch.compile graph breaks, per step."""
    return per_step(_in_selection(analysis, sel, "graph_breaks", compiled.GB_STEP, compiled.GB_HOST_US), sel.steps)


def recompile_time(analysis: Analysis, sel: Selection) -> float:
    """Dynamo's frame compiles inside the steps (patterns.recompiles), per step."""
    return per_step(_in_selection(analysis, sel, "recompiles", recompiles.RC_STEP, recompiles.RC_US), sel.steps)


def user_triton_time(analysis: Analysis, sel: Selection) -> float:
    """Kernel time of the user Triton launches tracekit recorded (the headline steps'), per step."""
    return per_step(_patterns_total(analysis, "triton_launches", triton_launch.TL_TIME_US), sel.steps)


def rnn_loop_time(analysis: Analysis, sel: Selection) -> float:
    """GPU time of the kernels launched in RNN cell loops (Patterns.rnn_cells, their windows), per step."""
    return per_step(_in_selection(analysis, sel, "rnn_cells", recurrent.RC_STEP, recurrent.RC_GPU_US), sel.steps)


def embedding_lookup_time(analysis: Analysis, sel: Selection) -> float:
    """GPU time of the embedding lookups and their backward (Patterns.embedding_lookups), per step."""
    return per_step(_in_selection(analysis, sel, "embedding_lookups", embeddings.EL_STEP, embeddings.EL_TIME_US),
                    sel.steps)


def cache_growth_time(analysis: Analysis, sel: Selection) -> float:
    """Copy kernel time of the torch.cat calls growing a cache (Patterns.cache_growth), per step."""
    return per_step(_in_selection(analysis, sel, "cache_growth", cache_growth.CG_STEP, cache_growth.CG_TIME_US),
                    sel.steps)


def weight_convert_time(analysis: Analysis, sel: Selection) -> float:
    """Kernel time of the static weights' conversions done every GEMM call (Patterns.weight_converts), per step."""
    return per_step(_in_selection(analysis, sel, "weight_converts", weight_convert.WC_STEP, weight_convert.WC_TIME_US),
                    sel.steps)


def recompute_time(analysis: Analysis, sel: Selection) -> float:
    """Kernel time of the forwards re-run in backward by activation checkpointing (Patterns.recompute), per step."""
    return per_step(_in_selection(analysis, sel, "recompute", recompute.RC_STEP, recompute.RC_TIME_US), sel.steps)


def anomaly_time(analysis: Analysis, sel: Selection) -> float:
    """Autograd anomaly mode's host time (patterns.anomaly): the backward NaN checks + the forward's
    stack capture, per step."""
    return per_step(_in_selection(analysis, sel, "anomaly", anomaly.AN_STEP, anomaly.AN_CHECK_US)
                    + _in_selection(analysis, sel, "anomaly", anomaly.AN_STEP, anomaly.AN_CAPTURE_US), sel.steps)


def cache_release_time(analysis: Analysis, sel: Selection) -> float:
    """cudaFree + cudaMalloc call time (patterns.cleanup), per step."""
    return per_step(_in_selection(analysis, sel, "cleanup", cleanup.CL_STEP, cleanup.CL_FREE_US)
                    + _in_selection(analysis, sel, "cleanup", cleanup.CL_STEP, cleanup.CL_MALLOC_US), sel.steps)


def gc_time(analysis: Analysis, sel: Selection) -> float:
    """Recorded garbage-collection pauses (patterns.cleanup, traces from tracekit profile), per step."""
    return per_step(_in_selection(analysis, sel, "cleanup", cleanup.CL_STEP, cleanup.CL_GC_US), sel.steps)


def launch_wait_time(analysis: Analysis, sel: Selection) -> float:
    """Host time the synchronous kernel launches spent past a normal launch (patterns.launch_blocking), per step."""
    return per_step(_in_selection(analysis, sel, "launch_blocking", launch_blocking.LB_STEP, launch_blocking.LB_WAIT_US),
                    sel.steps)
